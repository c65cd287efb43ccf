//! `--feature-gates`: kube-scheduler's list of `Name=true|false` pairs, read against the
//! Kubernetes feature gates as kube-scheduler knows them (1.35's, with their defaults). An
//! unknown gate is an error, as in kube-scheduler; a gate locked to its default cannot be
//! set otherwise; a scheduler gate set away from its default is accepted with a warning
//! naming it, since gantry schedules as kube-scheduler does with that gate at its default.
//! Gates of other components (the kubelet's, the API server's) change nothing in a
//! scheduler, gantry's or kube-scheduler's, and are accepted silently.

/// One known gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gate {
    /// The gate's name.
    pub name: &'static str,
    /// Its default.
    pub default: bool,
    /// Whether it is locked to its default (GA or deprecated for good).
    pub locked: bool,
    /// Whether it changes what kube-scheduler does.
    pub scheduler: bool,
}

const fn gate(name: &'static str, default: bool, locked: bool, scheduler: bool) -> Gate {
    Gate {
        name,
        default,
        locked,
        scheduler,
    }
}

/// The gates kube-scheduler accepts, sorted by name.
pub const GATES: &[Gate] = &[
    gate("APIResponseCompression", true, false, false),
    gate("APIServerIdentity", true, false, false),
    gate("APIServerTracing", true, true, false),
    gate("APIServingWithRoutine", false, false, false),
    gate("AggregatedDiscoveryRemoveBetaType", true, true, false),
    gate("AllAlpha", false, false, true),
    gate("AllBeta", false, false, true),
    gate("AllowDNSOnlyNodeCSR", false, false, false),
    gate(
        "AllowInsecureKubeletCertificateSigningRequests",
        false,
        false,
        false,
    ),
    gate(
        "AllowOverwriteTerminationGracePeriodSeconds",
        false,
        true,
        false,
    ),
    gate("AllowParsingUserUIDFromCertAuth", true, false, false),
    gate("AllowUnsafeMalformedObjectDeletion", false, false, false),
    gate("AnonymousAuthConfigurableEndpoints", true, true, false),
    gate("AnyVolumeDataSource", true, true, false),
    gate("AuthorizeNodeWithSelectors", true, true, false),
    gate(
        "AuthorizePodWebsocketUpgradeCreatePermission",
        true,
        false,
        false,
    ),
    gate("AuthorizeWithSelectors", true, true, false),
    gate("BtreeWatchCache", true, true, false),
    gate("CBORServingAndStorage", false, false, false),
    gate("CPUCFSQuotaPeriod", false, false, false),
    gate("CPUManagerPolicyAlphaOptions", false, false, false),
    gate("CPUManagerPolicyBetaOptions", true, false, false),
    gate("CPUManagerPolicyOptions", true, true, false),
    gate("CRDObservedGenerationTracking", false, false, false),
    gate("CRDValidationRatcheting", true, true, false),
    gate("CSIMigrationPortworx", true, true, false),
    gate("CSIServiceAccountTokenSecrets", true, false, false),
    gate("CSIVolumeHealth", false, false, false),
    gate("ChangeContainerStatusOnKubeletRestart", false, false, false),
    gate("ClearingNominatedNodeNameAfterBinding", true, false, true),
    gate(
        "CloudControllerManagerWatchBasedRoutesReconciliation",
        false,
        false,
        false,
    ),
    gate("CloudControllerManagerWebhook", false, false, false),
    gate("ClusterTrustBundle", false, false, false),
    gate("ClusterTrustBundleProjection", false, false, false),
    gate("ComponentFlagz", false, false, false),
    gate("ComponentSLIs", true, false, false),
    gate("ComponentStatusz", false, false, false),
    gate("ConcurrentWatchObjectDecode", false, false, false),
    gate("ConsistentListFromCache", true, true, false),
    gate("ConstrainedImpersonation", false, false, false),
    gate("ContainerCheckpoint", true, false, false),
    gate("ContainerRestartRules", true, false, false),
    gate("ContainerStopSignals", false, false, false),
    gate("ContextualLogging", true, false, false),
    gate("CoordinatedLeaderElection", false, false, true),
    gate("CrossNamespaceVolumeDataSource", false, false, false),
    gate("CustomResourceFieldSelectors", true, true, false),
    gate("DRAAdminAccess", true, false, true),
    gate("DRAConsumableCapacity", false, false, true),
    gate("DRADeviceBindingConditions", false, false, true),
    gate("DRADeviceTaintRules", false, false, true),
    gate("DRADeviceTaints", false, false, true),
    gate("DRAExtendedResource", false, false, true),
    gate("DRAPartitionableDevices", false, false, true),
    gate("DRAPrioritizedList", true, false, true),
    gate("DRAResourceClaimDeviceStatus", true, false, true),
    gate("DRASchedulerFilterTimeout", true, false, true),
    gate("DeclarativeValidation", true, false, false),
    gate("DeclarativeValidationTakeover", false, false, false),
    gate(
        "DeploymentReplicaSetTerminatingReplicas",
        true,
        false,
        false,
    ),
    gate("DetectCacheInconsistency", true, false, false),
    gate("DisableAllocatorDualWrite", true, true, false),
    gate("DisableCPUQuotaWithExclusiveCPUs", true, false, false),
    gate("DisableNodeKubeProxyVersion", true, false, false),
    gate("DynamicResourceAllocation", true, true, false),
    gate("EnvFiles", true, false, false),
    gate("EventedPLEG", false, false, false),
    gate("ExecProbeTimeout", true, true, false),
    gate("ExternalServiceAccountTokenSigner", true, false, false),
    gate("GangScheduling", false, false, true),
    gate("GenericWorkload", false, false, true),
    gate("GitRepoVolumeDriver", false, false, false),
    gate("GracefulNodeShutdown", true, false, false),
    gate("GracefulNodeShutdownBasedOnPodPriority", true, false, false),
    gate("HPAConfigurableTolerance", true, false, false),
    gate("HPAScaleToZero", false, false, false),
    gate("HonorPVReclaimPolicy", true, true, false),
    gate("HostnameOverride", true, false, false),
    gate("ImageMaximumGCAge", true, true, false),
    gate("ImageVolume", true, false, false),
    gate("ImageVolumeWithDigest", false, false, false),
    gate(
        "InPlacePodLevelResourcesVerticalScaling",
        false,
        false,
        true,
    ),
    gate("InPlacePodVerticalScaling", true, true, false),
    gate(
        "InPlacePodVerticalScalingAllocatedStatus",
        false,
        false,
        false,
    ),
    gate(
        "InPlacePodVerticalScalingExclusiveCPUs",
        false,
        false,
        false,
    ),
    gate(
        "InPlacePodVerticalScalingExclusiveMemory",
        false,
        false,
        false,
    ),
    gate("InTreePluginPortworxUnregister", false, false, false),
    gate("JobBackoffLimitPerIndex", true, true, false),
    gate("JobManagedBy", true, true, false),
    gate("JobPodReplacementPolicy", true, true, false),
    gate("JobSuccessPolicy", true, true, false),
    gate("KMSv1", false, false, false),
    gate("KubeletCgroupDriverFromCRI", true, true, false),
    gate("KubeletCrashLoopBackOffMax", true, false, false),
    gate("KubeletEnsureSecretPulledImages", true, false, false),
    gate("KubeletFineGrainedAuthz", true, false, false),
    gate("KubeletInUserNamespace", false, false, false),
    gate("KubeletPSI", true, false, false),
    gate("KubeletPodResourcesDynamicResources", true, false, false),
    gate("KubeletPodResourcesGet", true, false, false),
    gate("KubeletPodResourcesListUseActivePods", true, false, false),
    gate("KubeletRegistrationGetOnExistsOnly", false, false, false),
    gate("KubeletSeparateDiskGC", true, false, false),
    gate(
        "KubeletServiceAccountTokenForCredentialProviders",
        true,
        false,
        false,
    ),
    gate("KubeletTracing", true, true, false),
    gate("ListFromCacheSnapshot", true, false, false),
    gate(
        "LocalStorageCapacityIsolationFSQuotaMonitoring",
        false,
        false,
        false,
    ),
    gate("LogarithmicScaleDown", true, true, false),
    gate("LoggingAlphaOptions", false, false, false),
    gate("LoggingBetaOptions", true, false, false),
    gate("MatchLabelKeysInPodAffinity", true, true, false),
    gate("MatchLabelKeysInPodTopologySpread", true, false, true),
    gate(
        "MatchLabelKeysInPodTopologySpreadSelectorMerge",
        true,
        false,
        true,
    ),
    gate("MaxUnavailableStatefulSet", true, false, false),
    gate("MemoryManager", true, true, false),
    gate("MemoryQoS", false, false, false),
    gate("MultiCIDRServiceAllocator", true, true, false),
    gate("MutableCSINodeAllocatableCount", true, false, true),
    gate("MutablePVNodeAffinity", false, false, true),
    gate("MutablePodResourcesForSuspendedJobs", false, false, false),
    gate(
        "MutableSchedulingDirectivesForSuspendedJobs",
        false,
        false,
        false,
    ),
    gate("MutatingAdmissionPolicy", false, false, false),
    gate("NFTablesProxyMode", true, true, false),
    gate("NodeDeclaredFeatures", false, false, true),
    gate("NodeInclusionPolicyInPodTopologySpread", true, true, false),
    gate("NodeLogQuery", false, false, false),
    gate("NodeSwap", true, true, false),
    gate("NominatedNodeNameForExpectation", true, false, true),
    gate("OpenAPIEnums", true, false, false),
    gate("OpportunisticBatching", true, false, true),
    gate("OrderedNamespaceDeletion", true, true, false),
    gate("PodAndContainerStatsFromCRI", false, false, false),
    gate("PodCertificateRequest", false, false, false),
    gate("PodDeletionCost", true, false, false),
    gate("PodLevelResources", true, false, true),
    gate("PodLifecycleSleepAction", true, true, false),
    gate("PodLifecycleSleepActionAllowZero", true, true, false),
    gate("PodLogsQuerySplitStreams", false, false, false),
    gate("PodObservedGenerationTracking", true, true, false),
    gate("PodReadyToStartContainersCondition", true, false, false),
    gate("PodSchedulingReadiness", true, true, false),
    gate("PodTopologyLabelsAdmission", true, false, false),
    gate("PortForwardWebsockets", true, false, false),
    gate("PreferSameTrafficDistribution", true, true, false),
    gate("PreventStaticPodAPIReferences", true, false, false),
    gate("ProcMountType", true, false, false),
    gate("QOSReserved", false, false, false),
    gate("RecoverVolumeExpansionFailure", true, true, false),
    gate("RecursiveReadOnlyMounts", true, true, false),
    gate("ReduceDefaultCrashLoopBackOffDecay", false, false, false),
    gate("RelaxedDNSSearchValidation", true, true, false),
    gate("RelaxedEnvironmentVariableValidation", true, true, false),
    gate("RelaxedServiceNameValidation", false, false, false),
    gate("ReloadKubeletServerCertificateFile", true, false, false),
    gate("RemoteRequestHeaderUID", true, false, false),
    gate("ResilientWatchCacheInitialization", true, true, false),
    gate("ResourceHealthStatus", false, false, false),
    gate("RestartAllContainersOnContainerExits", false, false, false),
    gate("RetryGenerateName", true, true, false),
    gate("RotateKubeletServerCertificate", true, false, false),
    gate("RuntimeClassInImageCriAPI", false, false, false),
    gate("SELinuxChangePolicy", true, false, false),
    gate("SELinuxMount", false, false, false),
    gate("SELinuxMountReadWriteOncePod", true, false, false),
    gate("SchedulerAsyncAPICalls", false, false, true),
    gate("SchedulerAsyncPreemption", true, false, true),
    gate("SchedulerPopFromBackoffQ", true, false, true),
    gate("SchedulerQueueingHints", true, true, false),
    gate("SeparateCacheWatchRPC", false, false, false),
    gate("SeparateTaintEvictionController", true, true, false),
    gate("ServiceAccountNodeAudienceRestriction", true, false, false),
    gate("ServiceAccountTokenJTI", true, true, false),
    gate("ServiceAccountTokenNodeBinding", true, true, false),
    gate(
        "ServiceAccountTokenNodeBindingValidation",
        true,
        true,
        false,
    ),
    gate("ServiceAccountTokenPodNodeInfo", true, true, false),
    gate("ServiceTrafficDistribution", true, true, false),
    gate("SidecarContainers", true, true, false),
    gate("SizeBasedListCostEstimate", true, false, false),
    gate("StatefulSetSemanticRevisionComparison", true, false, false),
    gate("StorageCapacityScoring", false, false, true),
    gate("StorageNamespaceIndex", true, false, false),
    gate("StorageVersionAPI", false, false, false),
    gate("StorageVersionHash", true, false, false),
    gate("StorageVersionMigrator", false, false, false),
    gate("StreamingCollectionEncodingToJSON", true, true, false),
    gate("StreamingCollectionEncodingToProtobuf", true, true, false),
    gate("StrictIPCIDRValidation", false, false, false),
    gate("StructuredAuthenticationConfiguration", true, true, false),
    gate(
        "StructuredAuthenticationConfigurationEgressSelector",
        true,
        false,
        false,
    ),
    gate(
        "StructuredAuthenticationConfigurationJWKSMetrics",
        true,
        false,
        false,
    ),
    gate("StructuredAuthorizationConfiguration", true, true, false),
    gate("SupplementalGroupsPolicy", true, true, false),
    gate("SystemdWatchdog", true, true, false),
    gate("TaintTolerationComparisonOperators", false, false, true),
    gate(
        "TokenRequestServiceAccountUIDValidation",
        true,
        false,
        false,
    ),
    gate("TopologyAwareHints", true, true, false),
    gate("TopologyManagerPolicyAlphaOptions", false, false, false),
    gate("TopologyManagerPolicyBetaOptions", true, false, false),
    gate("TopologyManagerPolicyOptions", true, false, false),
    gate("TranslateStreamCloseWebsocketRequests", true, false, false),
    gate("UnauthenticatedHTTP2DOSMitigation", true, false, false),
    gate("UnknownVersionInteroperabilityProxy", false, false, false),
    gate("UserNamespacesHostNetworkSupport", false, false, false),
    gate("UserNamespacesSupport", true, false, false),
    gate("VolumeAttributesClass", true, false, true),
    gate("VolumeLimitScaling", false, false, true),
    gate("WatchCacheInitializationPostStartHook", false, false, false),
    gate("WatchFromStorageWithoutResourceVersion", false, true, false),
    gate("WatchList", true, false, false),
    gate("WinDSR", true, true, false),
    gate("WinOverlay", true, true, false),
    gate("WindowsCPUAndMemoryAffinity", false, false, false),
    gate("WindowsGracefulNodeShutdown", true, false, false),
    gate("WindowsHostNetwork", false, false, false),
];

/// Reads `--feature-gates`: the warnings for the gates gantry does not honour, or the error
/// naming the first gate that cannot be set.
pub fn parse(text: &str) -> Result<Vec<String>, String> {
    let mut warnings = Vec::new();
    for pair in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (name, value) = pair
            .split_once('=')
            .ok_or_else(|| format!("missing bool value for {pair}"))?;
        let (name, value) = (name.trim(), value.trim());
        let value = crate::kube_flags::go_bool(value)
            .map_err(|_| format!("invalid value of {name}={value}, err: not a boolean"))?;
        let gate = GATES
            .binary_search_by(|g| g.name.cmp(name))
            .map(|i| GATES[i])
            .map_err(|_| format!("unrecognized feature gate: {name}"))?;
        if value == gate.default {
            continue;
        }
        if gate.locked {
            return Err(format!(
                "cannot set feature gate {name} to {value}, feature is locked to {}",
                gate.default
            ));
        }
        if gate.scheduler {
            warnings.push(format!(
                "feature gate {name}={value} is not honoured: gantry schedules as with \
                 {name}={}",
                gate.default
            ));
        }
    }
    Ok(warnings)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gates_are_sorted_and_unique() {
        assert!(GATES.windows(2).all(|w| w[0].name < w[1].name));
    }

    #[test]
    fn known_gates_pass_others_fail_by_name() {
        assert_eq!(parse(""), Ok(vec![]));
        assert_eq!(
            parse("SchedulerAsyncPreemption=true,NodeSwap=true"),
            Ok(vec![])
        );
        assert_eq!(
            parse("KubeletPSI=false"),
            Ok(vec![]),
            "not a scheduler's gate"
        );
        let warnings = parse("SchedulerAsyncPreemption=false").unwrap();
        assert_eq!(warnings.len(), 1);
        assert!(warnings[0].starts_with("feature gate SchedulerAsyncPreemption=false"));
        assert_eq!(
            parse("NoSuchGate=true"),
            Err("unrecognized feature gate: NoSuchGate".to_string())
        );
        assert!(
            parse("SchedulerQueueingHints=false")
                .unwrap_err()
                .contains("locked")
        );
        assert!(
            parse("PodLevelResources")
                .unwrap_err()
                .contains("missing bool value")
        );
        assert!(
            parse("PodLevelResources=maybe")
                .unwrap_err()
                .contains("PodLevelResources=maybe")
        );
    }
}
