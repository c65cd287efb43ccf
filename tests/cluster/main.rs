//! `gantry run`, `gantry webhook`, `gantry explain` and `gantry what-if` against a real
//! kube-apiserver and etcd (and kube-controller-manager or Prometheus where they take part).
//! One test binary with a module per subject, so that the crate is linked into tests once.
//! Tests that run at the same time share a control plane and keep apart by node labels and
//! scheduler names; a test that needs a cluster of its own starts one.

use gantry_test_support as support;

mod explain;
mod extenders;
mod gangs;
mod gpu;
mod hami;
mod kubeadm;
mod leader;
mod load;
mod outage;
mod preemption;
mod protobuf;
mod pv_controller;
mod rbac;
mod restart;
mod scheduling;
mod volumes;
mod webhook;
mod whatif;
