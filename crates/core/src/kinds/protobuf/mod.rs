//! The protobuf messages of the kinds the API server sends in Kubernetes' protobuf
//! encoding (pods and nodes, as kube-scheduler asks for them), as far as scheduling reads
//! them: [`pod`], its [`volume`]s, [`node`], and the [`meta`]data they share. A decoded
//! message becomes the API's own type (only the fields read), so that one conversion into
//! the model serves JSON and protobuf alike. The envelope and the watch framing around them
//! are the adapter's.

pub mod meta;
pub mod node;
pub mod pod;
pub mod volume;
