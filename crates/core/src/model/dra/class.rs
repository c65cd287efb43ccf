//! DeviceClasses: the devices a request of the class may have (CEL selectors), the
//! configuration every allocation of the class carries, and the extended resource the class
//! stands for.

use k8s_openapi::api::resource::v1 as api;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::{object_error, selectors_api};

/// A DeviceClass.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceClassModel {
    /// `metadata.name`.
    pub name: String,
    /// `spec.selectors`: CEL expressions every device of the class satisfies.
    pub selectors: Vec<String>,
    /// `spec.config`, copied into each allocation of the class.
    pub config: Vec<api::DeviceClassConfiguration>,
    /// `spec.extendedResourceName`: pods asking for this extended resource get a device of
    /// the class.
    pub extended_resource_name: Option<String>,
}

impl DeviceClassModel {
    /// Reads a DeviceClass; errors name it and the field.
    pub fn from_api(class: &api::DeviceClass) -> Result<Self, String> {
        let name = class.metadata.name.clone().unwrap_or_default();
        let empty = api::DeviceClassSpec::default();
        let spec = class.spec.as_ref().unwrap_or(&empty);
        let selectors = super::selectors(
            spec.selectors.as_deref().unwrap_or_default(),
            "spec.selectors",
        )
        .map_err(|reason| object_error("deviceclass", None, &name, &reason))?;
        Ok(DeviceClassModel {
            name,
            selectors,
            config: spec.config.clone().unwrap_or_default(),
            extended_resource_name: spec.extended_resource_name.clone(),
        })
    }

    /// The class as the API holds it, with what the scheduler reads.
    pub fn to_api(&self) -> api::DeviceClass {
        api::DeviceClass {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                ..Default::default()
            },
            spec: Some(api::DeviceClassSpec {
                selectors: selectors_api(&self.selectors),
                config: (!self.config.is_empty()).then(|| self.config.clone()),
                extended_resource_name: self.extended_resource_name.clone(),
            }),
        }
    }
}
