#!/usr/bin/env python3
"""Offline check of deploy/kubernetes/*.yaml against the upstream API types.

    check_manifests.py DIR              check every document of every DIR/*.yaml
    check_manifests.py --self-test DIR  the same check, then mutate DIR's documents in memory
                                        and assert that each mutation is reported (the
                                        checker can fail)

Debian bookworm's kubectl is too old to know resource.k8s.io/v1 or KubeVirt, and a cluster is
not at hand in CI, so the schemas are transcribed below from the upstream Go types: for each
struct, its fields' JSON names and types. A document fails when its (apiVersion, kind) has no
schema, a field is not in its struct's table, a value has the wrong type (string, integer,
boolean, list, object; null is refused too), a required field is missing, or a one-of group is
not set exactly once. On top of the types: CEL expressions must have balanced quotes and
brackets, DeviceClass selectors must test device.driver == "vfio.vfiod.io", and references
between the documents must resolve (RBAC binding -> ServiceAccount and ClusterRole, pod template
-> ServiceAccount and volumes, claim template -> DeviceClass, VM -> its claims, their templates
and requests, a VM's deviceName -> a resource the KubeVirt CR permits, policy binding ->
policy, policy -> the service account it matches).

Exit status: 0 clean; 1 problems found (one line each: file, document number counted from 1,
kind/name, field path, message); 2 usage or environment errors (no python3-yaml, no files).
"""

import copy
import os
import re
import sys

try:
    import yaml
except ImportError:  # pragma: no cover - the message is the point
    print("check_manifests.py: python3-yaml (PyYAML) is missing: apt-get install python3-yaml",
          file=sys.stderr)
    sys.exit(2)

DRIVER = "vfio.vfiod.io"

# ----------------------------------------------------------------------------------------------
# Schemas. Notation:
#   'string' 'int' 'bool'      scalars ('int' refuses true/false and floats)
#   'quantity'                 resource.Quantity: a string or a number ("4Gi", "10m", 1)
#   'intOrString'              intstr.IntOrString
#   'cel'                      a string holding a CEL expression (checked further below)
#   'any'                      anything (runtime.RawExtension)
#   'object'                   a struct this file does not transcribe: must be a mapping, its
#                              contents are not checked (none of the manifests uses one)
#   '[T]'                      a list of T;  '{T}': a map from string keys to T
#   anything else              a struct of these tables (KubeVirt's own structs that share a
#                              name with a Kubernetes one are spelled kv.Name)
# In a struct: 'name!' is a required field (Go: no omitempty and no +optional, or documented as
# Required / +required); '..' lists inlined structs (Go `json:",inline"`); '@one' lists groups of
# fields of which exactly one must be set (Go +oneOf / "exactly one of").
# apiVersion and kind (metav1.TypeMeta) are checked for every document, not listed.
# Each table follows one upstream file and covers whole structs: every field of a listed struct
# is there, with the nested structs no manifest uses left as 'object'.

# k8s.io/apimachinery v0.34.2 (the version KubeVirt v1.9.0 vendors), pkg/apis/meta/v1/types.go
META = {
    'ObjectMeta': {'name': 'string', 'generateName': 'string', 'namespace': 'string',
                   'selfLink': 'string', 'uid': 'string', 'resourceVersion': 'string',
                   'generation': 'int', 'creationTimestamp': 'string',
                   'deletionTimestamp': 'string', 'deletionGracePeriodSeconds': 'int',
                   'labels': '{string}', 'annotations': '{string}',
                   'ownerReferences': '[OwnerReference]', 'finalizers': '[string]',
                   'managedFields': '[object]'},
    'OwnerReference': {'apiVersion!': 'string', 'kind!': 'string', 'name!': 'string',
                       'uid!': 'string', 'controller': 'bool', 'blockOwnerDeletion': 'bool'},
    'LabelSelector': {'matchLabels': '{string}', 'matchExpressions': '[LabelSelectorRequirement]'},
    'LabelSelectorRequirement': {'key!': 'string', 'operator!': 'string', 'values': '[string]'},
}

# k8s.io/api v0.34.2 (Kubernetes 1.34, where resource.k8s.io/v1 is GA), core/v1/types.go
CORE_V1 = {
    'Namespace': {'metadata': 'ObjectMeta', 'spec': 'NamespaceSpec', 'status': 'object'},
    'NamespaceSpec': {'finalizers': '[string]'},
    'ServiceAccount': {'metadata': 'ObjectMeta', 'secrets': '[object]',
                       'imagePullSecrets': '[LocalObjectReference]',
                       'automountServiceAccountToken': 'bool'},
    'LocalObjectReference': {'name': 'string'},
    'PodTemplateSpec': {'metadata': 'ObjectMeta', 'spec': 'PodSpec'},
    'Pod': {'metadata': 'ObjectMeta', 'spec!': 'PodSpec'},
    'PodSpec': {'volumes': '[Volume]', 'initContainers': '[Container]',
                'containers!': '[Container]', 'ephemeralContainers': '[object]',
                'restartPolicy': 'string', 'terminationGracePeriodSeconds': 'int',
                'activeDeadlineSeconds': 'int', 'dnsPolicy': 'string', 'nodeSelector': '{string}',
                'serviceAccountName': 'string', 'serviceAccount': 'string',
                'automountServiceAccountToken': 'bool', 'nodeName': 'string',
                'hostNetwork': 'bool', 'hostPID': 'bool', 'hostIPC': 'bool',
                'shareProcessNamespace': 'bool', 'securityContext': 'PodSecurityContext',
                'imagePullSecrets': '[LocalObjectReference]', 'hostname': 'string',
                'subdomain': 'string', 'affinity': 'object', 'schedulerName': 'string',
                'tolerations': '[Toleration]', 'hostAliases': '[object]',
                'priorityClassName': 'string', 'priority': 'int', 'dnsConfig': 'object',
                'readinessGates': '[object]', 'runtimeClassName': 'string',
                'enableServiceLinks': 'bool', 'preemptionPolicy': 'string',
                'overhead': '{quantity}', 'topologySpreadConstraints': '[object]',
                'setHostnameAsFQDN': 'bool', 'os': 'object', 'hostUsers': 'bool',
                'schedulingGates': '[object]', 'resourceClaims': '[object]',
                'resources': 'ResourceRequirements', 'hostnameOverride': 'string'},
    'Container': {'name!': 'string', 'image': 'string', 'command': '[string]', 'args': '[string]',
                  'workingDir': 'string', 'ports': '[object]', 'envFrom': '[object]',
                  'env': '[EnvVar]', 'resources': 'ResourceRequirements',
                  'resizePolicy': '[object]', 'restartPolicy': 'string',
                  'restartPolicyRules': '[object]', 'volumeMounts': '[VolumeMount]',
                  'volumeDevices': '[object]', 'livenessProbe': 'object',
                  'readinessProbe': 'object', 'startupProbe': 'object', 'lifecycle': 'object',
                  'terminationMessagePath': 'string', 'terminationMessagePolicy': 'string',
                  'imagePullPolicy': 'string', 'securityContext': 'SecurityContext',
                  'stdin': 'bool', 'stdinOnce': 'bool', 'tty': 'bool'},
    'EnvVar': {'name!': 'string', 'value': 'string', 'valueFrom': 'EnvVarSource'},
    'EnvVarSource': {'fieldRef': 'ObjectFieldSelector', 'resourceFieldRef': 'object',
                     'configMapKeyRef': 'object', 'secretKeyRef': 'object', 'fileKeyRef': 'object',
                     '@one': [('fieldRef', 'resourceFieldRef', 'configMapKeyRef', 'secretKeyRef',
                               'fileKeyRef')]},
    'ObjectFieldSelector': {'apiVersion': 'string', 'fieldPath!': 'string'},
    'SecurityContext': {'capabilities': 'Capabilities', 'privileged': 'bool',
                        'seLinuxOptions': 'object', 'windowsOptions': 'object', 'runAsUser': 'int',
                        'runAsGroup': 'int', 'runAsNonRoot': 'bool',
                        'readOnlyRootFilesystem': 'bool', 'allowPrivilegeEscalation': 'bool',
                        'procMount': 'string', 'seccompProfile': 'SeccompProfile',
                        'appArmorProfile': 'object'},
    'Capabilities': {'add': '[string]', 'drop': '[string]'},
    'SeccompProfile': {'type!': 'string', 'localhostProfile': 'string'},
    'PodSecurityContext': {'seLinuxOptions': 'object', 'windowsOptions': 'object',
                           'runAsUser': 'int', 'runAsGroup': 'int', 'runAsNonRoot': 'bool',
                           'supplementalGroups': '[int]', 'supplementalGroupsPolicy': 'string',
                           'fsGroup': 'int', 'sysctls': '[object]',
                           'fsGroupChangePolicy': 'string', 'seccompProfile': 'SeccompProfile',
                           'appArmorProfile': 'object', 'seLinuxChangePolicy': 'string'},
    'ResourceRequirements': {'limits': '{quantity}', 'requests': '{quantity}',
                             'claims': '[object]'},
    'VolumeMount': {'name!': 'string', 'readOnly': 'bool', 'recursiveReadOnly': 'string',
                    'mountPath!': 'string', 'subPath': 'string', 'mountPropagation': 'string',
                    'subPathExpr': 'string'},
    'Volume': {'name!': 'string', '..': ['VolumeSource']},
    'VolumeSource': {'hostPath': 'HostPathVolumeSource', 'emptyDir': 'object',
                     'gcePersistentDisk': 'object', 'awsElasticBlockStore': 'object',
                     'gitRepo': 'object', 'secret': 'object', 'nfs': 'object', 'iscsi': 'object',
                     'glusterfs': 'object', 'persistentVolumeClaim': 'object', 'rbd': 'object',
                     'flexVolume': 'object', 'cinder': 'object', 'cephfs': 'object',
                     'flocker': 'object', 'downwardAPI': 'object', 'fc': 'object',
                     'azureFile': 'object', 'configMap': 'object', 'vsphereVolume': 'object',
                     'quobyte': 'object', 'azureDisk': 'object', 'photonPersistentDisk': 'object',
                     'projected': 'object', 'portworxVolume': 'object', 'scaleIO': 'object',
                     'storageos': 'object', 'csi': 'object', 'ephemeral': 'object',
                     'image': 'object',
                     '@one': [('hostPath', 'emptyDir', 'gcePersistentDisk',
                               'awsElasticBlockStore', 'gitRepo', 'secret', 'nfs', 'iscsi',
                               'glusterfs', 'persistentVolumeClaim', 'rbd', 'flexVolume', 'cinder',
                               'cephfs', 'flocker', 'downwardAPI', 'fc', 'azureFile', 'configMap',
                               'vsphereVolume', 'quobyte', 'azureDisk', 'photonPersistentDisk',
                               'projected', 'portworxVolume', 'scaleIO', 'storageos', 'csi',
                               'ephemeral', 'image')]},
    'HostPathVolumeSource': {'path!': 'string', 'type': 'string'},
    'Toleration': {'key': 'string', 'operator': 'string', 'value': 'string', 'effect': 'string',
                   'tolerationSeconds': 'int'},
}

# k8s.io/api v0.34.2, apps/v1/types.go
APPS_V1 = {
    'DaemonSet': {'metadata': 'ObjectMeta', 'spec': 'DaemonSetSpec', 'status': 'object'},
    'DaemonSetSpec': {'selector!': 'LabelSelector', 'template!': 'PodTemplateSpec',
                      'updateStrategy': 'DaemonSetUpdateStrategy', 'minReadySeconds': 'int',
                      'revisionHistoryLimit': 'int'},
    'DaemonSetUpdateStrategy': {'type': 'string', 'rollingUpdate': 'RollingUpdateDaemonSet'},
    'RollingUpdateDaemonSet': {'maxUnavailable': 'intOrString', 'maxSurge': 'intOrString'},
}

# k8s.io/api v0.34.2, rbac/v1/types.go
RBAC_V1 = {
    'ClusterRole': {'metadata': 'ObjectMeta', 'rules': '[PolicyRule]',
                    'aggregationRule': 'AggregationRule'},
    'PolicyRule': {'verbs!': '[string]', 'apiGroups': '[string]', 'resources': '[string]',
                   'resourceNames': '[string]', 'nonResourceURLs': '[string]'},
    'AggregationRule': {'clusterRoleSelectors': '[LabelSelector]'},
    'ClusterRoleBinding': {'metadata': 'ObjectMeta', 'subjects': '[Subject]',
                           'roleRef!': 'RoleRef'},
    'Subject': {'kind!': 'string', 'apiGroup': 'string', 'name!': 'string', 'namespace': 'string'},
    'RoleRef': {'apiGroup!': 'string', 'kind!': 'string', 'name!': 'string'},
}

# k8s.io/api v0.34.2, admissionregistration/v1/types.go
ADMISSION_V1 = {
    'ValidatingAdmissionPolicy': {'metadata': 'ObjectMeta', 'spec': 'ValidatingAdmissionPolicySpec',
                                  'status': 'object'},
    'ValidatingAdmissionPolicySpec': {'paramKind': 'ParamKind',
                                      'matchConstraints!': 'MatchResources',
                                      'validations': '[Validation]', 'failurePolicy': 'string',
                                      'auditAnnotations': '[AuditAnnotation]',
                                      'matchConditions': '[MatchCondition]',
                                      'variables': '[Variable]'},
    'ParamKind': {'apiVersion!': 'string', 'kind!': 'string'},
    'MatchResources': {'namespaceSelector': 'LabelSelector', 'objectSelector': 'LabelSelector',
                       'resourceRules': '[NamedRuleWithOperations]',
                       'excludeResourceRules': '[NamedRuleWithOperations]',
                       'matchPolicy': 'string'},
    'NamedRuleWithOperations': {'resourceNames': '[string]', '..': ['RuleWithOperations']},
    'RuleWithOperations': {'operations!': '[string]', '..': ['Rule']},
    'Rule': {'apiGroups!': '[string]', 'apiVersions!': '[string]', 'resources!': '[string]',
             'scope': 'string'},
    'Validation': {'expression!': 'cel', 'message': 'string', 'reason': 'string',
                   'messageExpression': 'cel'},
    'AuditAnnotation': {'key!': 'string', 'valueExpression!': 'cel'},
    'MatchCondition': {'name!': 'string', 'expression!': 'cel'},
    'Variable': {'name!': 'string', 'expression!': 'cel'},
    'ValidatingAdmissionPolicyBinding': {'metadata': 'ObjectMeta',
                                         'spec': 'ValidatingAdmissionPolicyBindingSpec'},
    'ValidatingAdmissionPolicyBindingSpec': {'policyName!': 'string', 'paramRef': 'ParamRef',
                                             'matchResources': 'MatchResources',
                                             'validationActions!': '[string]'},
    'ParamRef': {'name': 'string', 'namespace': 'string', 'selector': 'LabelSelector',
                 'parameterNotFoundAction': 'string'},
}

# k8s.io/api v0.34.2, resource/v1/types.go
RESOURCE_V1 = {
    'DeviceClass': {'metadata': 'ObjectMeta', 'spec!': 'DeviceClassSpec'},
    'DeviceClassSpec': {'selectors': '[DeviceSelector]', 'config': '[DeviceClassConfiguration]',
                        'extendedResourceName': 'string'},
    'DeviceClassConfiguration': {'..': ['DeviceConfiguration']},
    'DeviceConfiguration': {'opaque': 'OpaqueDeviceConfiguration', '@one': [('opaque',)]},
    'OpaqueDeviceConfiguration': {'driver!': 'string', 'parameters!': 'any'},
    'DeviceSelector': {'cel': 'CELDeviceSelector', '@one': [('cel',)]},
    'CELDeviceSelector': {'expression!': 'cel'},
    'ResourceClaimTemplate': {'metadata': 'ObjectMeta', 'spec!': 'ResourceClaimTemplateSpec'},
    'ResourceClaimTemplateSpec': {'metadata': 'ObjectMeta', 'spec!': 'ResourceClaimSpec'},
    'ResourceClaimSpec': {'devices': 'DeviceClaim'},
    'DeviceClaim': {'requests': '[DeviceRequest]', 'constraints': '[DeviceConstraint]',
                    'config': '[DeviceClaimConfiguration]'},
    'DeviceRequest': {'name!': 'string', 'exactly': 'ExactDeviceRequest',
                      'firstAvailable': '[DeviceSubRequest]',
                      '@one': [('exactly', 'firstAvailable')]},
    'ExactDeviceRequest': {'deviceClassName!': 'string', 'selectors': '[DeviceSelector]',
                           'allocationMode': 'string', 'count': 'int', 'adminAccess': 'bool',
                           'tolerations': '[DeviceToleration]',
                           'capacity': 'CapacityRequirements'},
    'DeviceSubRequest': {'name!': 'string', 'deviceClassName!': 'string',
                         'selectors': '[DeviceSelector]', 'allocationMode': 'string',
                         'count': 'int', 'tolerations': '[DeviceToleration]',
                         'capacity': 'CapacityRequirements'},
    'DeviceConstraint': {'requests': '[string]', 'matchAttribute': 'string',
                         'distinctAttribute': 'string'},
    'DeviceClaimConfiguration': {'requests': '[string]', '..': ['DeviceConfiguration']},
    'DeviceToleration': {'key': 'string', 'operator': 'string', 'value': 'string',
                         'effect': 'string', 'tolerationSeconds': 'int'},
    'CapacityRequirements': {'requests': '{quantity}'},
}

# KubeVirt v1.9.0, staging/src/kubevirt.io/api/core/v1/types.go, schema.go and
# componentconfig.go (KubeVirt's own types; the Kubernetes ones it embeds are those above).
# Required fields as KubeVirt's generated CRD validation has them.
KUBEVIRT_V1 = {
    'VirtualMachine': {'metadata': 'ObjectMeta', 'spec!': 'VirtualMachineSpec', 'status': 'object'},
    'VirtualMachineSpec': {'running': 'bool', 'runStrategy': 'string', 'instancetype': 'object',
                           'preference': 'object',
                           'template!': 'VirtualMachineInstanceTemplateSpec',
                           'dataVolumeTemplates': '[object]', 'updateVolumesStrategy': 'string'},
    'VirtualMachineInstanceTemplateSpec': {'metadata': 'ObjectMeta',
                                           'spec': 'VirtualMachineInstanceSpec'},
    'VirtualMachineInstance': {'metadata': 'ObjectMeta', 'spec!': 'VirtualMachineInstanceSpec',
                               'status': 'object'},
    'VirtualMachineInstanceSpec': {
        'priorityClassName': 'string', 'domain!': 'DomainSpec', 'nodeSelector': '{string}',
        'affinity': 'object', 'schedulerName': 'string', 'serviceAccountName': 'string',
        'tolerations': '[Toleration]', 'topologySpreadConstraints': '[object]',
        'evictionStrategy': 'string', 'startStrategy': 'string',
        'terminationGracePeriodSeconds': 'int', 'volumes': '[kv.Volume]',
        'livenessProbe': 'object', 'readinessProbe': 'object', 'hostname': 'string',
        'subdomain': 'string', 'networks': '[object]', 'dnsPolicy': 'string', 'dnsConfig': 'object',
        'accessCredentials': '[object]', 'architecture': 'string',
        'resourceClaims': '[VirtualMachineInstanceResourceClaim]', 'utilityVolumes': '[object]'},
    'VirtualMachineInstanceResourceClaim': {
        'name!': 'string', 'resourceClaimName': 'string', 'resourceClaimTemplateName': 'string',
        '@one': [('resourceClaimName', 'resourceClaimTemplateName')]},
    'DomainSpec': {'resources': 'kv.ResourceRequirements', 'cpu': 'object', 'memory': 'Memory',
                   'machine': 'object', 'firmware': 'object', 'clock': 'object',
                   'features': 'object', 'devices!': 'Devices', 'ioThreadsPolicy': 'string',
                   'ioThreads': 'object', 'chassis': 'object', 'launchSecurity': 'object',
                   'rebootPolicy': 'string'},
    'kv.ResourceRequirements': {'requests': '{quantity}', 'limits': '{quantity}',
                                'overcommitGuestOverhead': 'bool'},
    'Memory': {'hugepages': 'object', 'guest': 'quantity', 'maxGuest': 'quantity',
               'reservedOverhead': 'object'},
    'Devices': {'useVirtioTransitional': 'bool', 'disableHotplug': 'bool', 'disks': '[Disk]',
                'watchdog': 'object', 'interfaces': '[object]', 'inputs': '[object]',
                'autoattachPodInterface': 'bool', 'autoattachGraphicsDevice': 'bool',
                'autoattachSerialConsole': 'bool', 'logSerialConsole': 'bool',
                'autoattachMemBalloon': 'bool', 'autoattachInputDevice': 'bool',
                'autoattachVSOCK': 'bool', 'rng': 'object', 'blockMultiQueue': 'bool',
                'networkInterfaceMultiqueue': 'bool', 'gpus': '[GPU]', 'downwardMetrics': 'object',
                'panicDevices': '[object]', 'filesystems': '[object]',
                'hostDevices': '[HostDevice]', 'clientPassthrough': 'object', 'sound': 'object',
                'tpm': 'object', 'video': 'object'},
    'Disk': {'name!': 'string', 'bootOrder': 'int', 'serial': 'string',
             'dedicatedIOThread': 'bool', 'cache': 'string', 'io': 'string', 'tag': 'string',
             'blockSize': 'object', 'shareable': 'bool', 'errorPolicy': 'string',
             'changedBlockTracking': 'bool', '..': ['DiskDevice']},
    'DiskDevice': {'disk': 'DiskTarget', 'lun': 'object', 'cdrom': 'object'},
    'DiskTarget': {'bus': 'string', 'readonly': 'bool', 'pciAddress': 'string'},
    'HostDevice': {'name!': 'string', 'deviceName': 'string', 'tag': 'string',
                   '..': ['ClaimRequest']},
    'GPU': {'name!': 'string', 'deviceName': 'string', 'virtualGPUOptions': 'VGPUOptions',
            'tag': 'string', '..': ['ClaimRequest']},
    'VGPUOptions': {'display': 'VGPUDisplayOptions'},
    'VGPUDisplayOptions': {'enabled': 'bool', 'ramFB': 'object'},
    'ClaimRequest': {'claimName': 'string', 'requestName': 'string'},
    'kv.Volume': {'name!': 'string', '..': ['kv.VolumeSource']},
    'kv.VolumeSource': {'hostDisk': 'object', 'persistentVolumeClaim': 'object',
                        'cloudInitNoCloud': 'object', 'cloudInitConfigDrive': 'object',
                        'sysprep': 'object', 'containerDisk': 'ContainerDiskSource',
                        'ephemeral': 'object', 'emptyDisk': 'object', 'dataVolume': 'object',
                        'configMap': 'object', 'secret': 'object', 'downwardAPI': 'object',
                        'serviceAccount': 'object', 'downwardMetrics': 'object',
                        'memoryDump': 'object', 'containerPath': 'object',
                        '@one': [('hostDisk', 'persistentVolumeClaim', 'cloudInitNoCloud',
                                  'cloudInitConfigDrive', 'sysprep', 'containerDisk', 'ephemeral',
                                  'emptyDisk', 'dataVolume', 'configMap', 'secret', 'downwardAPI',
                                  'serviceAccount', 'downwardMetrics', 'memoryDump',
                                  'containerPath')]},
    'ContainerDiskSource': {'image!': 'string', 'imagePullSecret': 'string', 'path': 'string',
                            'imagePullPolicy': 'string'},
    'KubeVirt': {'metadata': 'ObjectMeta', 'spec!': 'KubeVirtSpec', 'status': 'object'},
    'KubeVirtSpec': {'imageTag': 'string', 'imageRegistry': 'string', 'imagePullPolicy': 'string',
                     'imagePullSecrets': '[LocalObjectReference]', 'monitorNamespace': 'string',
                     'serviceMonitorNamespace': 'string', 'monitorAccount': 'string',
                     'workloadUpdateStrategy': 'object', 'uninstallStrategy': 'string',
                     'certificateRotateStrategy': 'object', 'productVersion': 'string',
                     'productName': 'string', 'productComponent': 'string',
                     'synchronizationPort': 'string', 'configuration': 'KubeVirtConfiguration',
                     'infra': 'object', 'workloads': 'object', 'customizeComponents': 'object'},
    'KubeVirtConfiguration': {
        'cpuModel': 'string', 'cpuRequest': 'quantity',
        'developerConfiguration': 'DeveloperConfiguration', 'emulatedMachines': '[string]',
        'imagePullPolicy': 'string', 'migrations': 'object', 'machineType': 'string',
        'network': 'object', 'ovmfPath': 'string', 'selinuxLauncherType': 'string',
        'defaultRuntimeClass': 'string', 'smbios': 'object', 'architectureConfiguration': 'object',
        'evictionStrategy': 'string', 'additionalGuestMemoryOverheadRatio': 'string',
        'supportContainerResources': '[object]', 'supportedGuestAgentVersions': '[string]',
        'memBalloonStatsPeriod': 'int', 'permittedHostDevices': 'PermittedHostDevices',
        'mediatedDevicesConfiguration': 'MediatedDevicesConfiguration', 'minCPUModel': 'string',
        'obsoleteCPUModels': '{bool}', 'virtualMachineInstancesPerNode': 'int',
        'apiConfiguration': 'object', 'webhookConfiguration': 'object',
        'controllerConfiguration': 'object', 'handlerConfiguration': 'object',
        'tlsConfiguration': 'object', 'seccompConfiguration': 'object',
        'vmStateStorageClass': 'string', 'virtualMachineOptions': 'object',
        'ksmConfiguration': 'object', 'autoCPULimitNamespaceLabelSelector': 'LabelSelector',
        'liveUpdateConfiguration': 'object', 'vmRolloutStrategy': 'string',
        'commonInstancetypesDeployment': 'object', 'virtTemplateDeployment': 'object',
        'instancetype': 'object', 'hypervisors': '[object]',
        'changedBlockTrackingLabelSelectors': 'object',
        'persistentReservationConfiguration': 'object', 'confidentialCompute': 'object',
        'roleAggregationStrategy': 'string'},
    'DeveloperConfiguration': {'featureGates': '[string]', 'disabledFeatureGates': '[string]',
                               'pvcTolerateLessSpaceUpToPercent': 'int',
                               'minimumReservePVCBytes': 'int', 'memoryOvercommit': 'int',
                               'nodeSelectors': '{string}', 'useEmulation': 'bool',
                               'cpuAllocationRatio': 'int', 'minimumClusterTSCFrequency': 'int',
                               'diskVerification': 'object', 'logVerbosity': 'object',
                               'clusterProfiler': 'bool'},
    'PermittedHostDevices': {'pciHostDevices': '[PciHostDevice]',
                             'mediatedDevices': '[MediatedHostDevice]', 'usb': '[object]'},
    'PciHostDevice': {'pciVendorSelector!': 'string', 'resourceName!': 'string',
                      'externalResourceProvider': 'bool'},
    'MediatedHostDevice': {'mdevNameSelector!': 'string', 'resourceName!': 'string',
                           'externalResourceProvider': 'bool'},
    # enabled: from v1.8.0 (it replaces the DisableMDEVConfiguration feature gate).
    'MediatedDevicesConfiguration': {'mediatedDevicesTypes': '[string]',
                                     'mediatedDeviceTypes': '[string]',
                                     'nodeMediatedDeviceTypes': '[NodeMediatedDeviceTypesConfig]',
                                     'enabled': 'bool'},
    'NodeMediatedDeviceTypesConfig': {'nodeSelector!': '{string}',
                                      'mediatedDevicesTypes': '[string]',
                                      'mediatedDeviceTypes': '[string]'},
}


def _merge(*tables):
    out = {}
    for t in tables:
        for name, fields in t.items():
            assert name not in out, "struct %s is in two tables" % name
            out[name] = fields
    return out


STRUCTS = _merge(META, CORE_V1, APPS_V1, RBAC_V1, ADMISSION_V1, RESOURCE_V1, KUBEVIRT_V1)

# (apiVersion, kind) -> (root struct, namespaced)
KINDS = {
    ('v1', 'Namespace'): ('Namespace', False),
    ('v1', 'ServiceAccount'): ('ServiceAccount', True),
    ('v1', 'Pod'): ('Pod', True),
    ('apps/v1', 'DaemonSet'): ('DaemonSet', True),
    ('rbac.authorization.k8s.io/v1', 'ClusterRole'): ('ClusterRole', False),
    ('rbac.authorization.k8s.io/v1', 'ClusterRoleBinding'): ('ClusterRoleBinding', False),
    ('admissionregistration.k8s.io/v1', 'ValidatingAdmissionPolicy'):
        ('ValidatingAdmissionPolicy', False),
    ('admissionregistration.k8s.io/v1', 'ValidatingAdmissionPolicyBinding'):
        ('ValidatingAdmissionPolicyBinding', False),
    ('resource.k8s.io/v1', 'DeviceClass'): ('DeviceClass', False),
    ('resource.k8s.io/v1', 'ResourceClaimTemplate'): ('ResourceClaimTemplate', True),
    ('kubevirt.io/v1', 'VirtualMachine'): ('VirtualMachine', True),
    ('kubevirt.io/v1', 'VirtualMachineInstance'): ('VirtualMachineInstance', True),
    ('kubevirt.io/v1', 'KubeVirt'): ('KubeVirt', True),
}

# Namespaces a manifest may use without defining them: Kubernetes' own, and the one KubeVirt's
# operator installs into.
EXTERNAL_NAMESPACES = {'default', 'kube-system', 'kubevirt'}


def fields_of(struct):
    """The struct's fields with the inlined ones expanded: {json name: (type, required)}."""
    out = {}
    for key, typ in STRUCTS[struct].items():
        if key == '..':
            for inner in typ:
                out.update(fields_of(inner))
        elif key != '@one':
            out[key.rstrip('!')] = (typ, key.endswith('!'))
    return out


def one_of_groups(struct):
    groups = list(STRUCTS[struct].get('@one', []))
    for inner in STRUCTS[struct].get('..', []):
        groups += one_of_groups(inner)
    return groups


def _check_tables():
    """The tables themselves: every named type exists (run at start; a broken table is a bug)."""
    scalars = {'string', 'int', 'bool', 'quantity', 'intOrString', 'cel', 'any', 'object'}

    def known(t):
        if t[0] in '[{':
            return known(t[1:-1])
        return t in scalars or t in STRUCTS
    for name, table in STRUCTS.items():
        for key, typ in table.items():
            if key == '..':
                assert all(i in STRUCTS for i in typ), name
            elif key == '@one':
                flds = fields_of(name)
                assert all(f in flds for g in typ for f in g), name
            else:
                assert known(typ), "%s.%s: unknown type %s" % (name, key, typ)
    for root, _ in KINDS.values():
        assert root in STRUCTS, root


# ----------------------------------------------------------------------------------------------
# Documents

class Doc:
    def __init__(self, file, index, body):
        self.file = file      # base name
        self.index = index    # 1-based within the file
        self.body = body

    @property
    def kind(self):
        return self.body.get('kind') if isinstance(self.body, dict) else None

    def meta(self, key, default=None):
        m = self.body.get('metadata') if isinstance(self.body, dict) else None
        return m.get(key, default) if isinstance(m, dict) else default

    @property
    def name(self):
        return self.meta('name')

    @property
    def namespace(self):
        return self.meta('namespace')

    def label(self):
        return "%s %s" % (self.kind or '?', self.name or '?')


class UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML keeps the last of two equal keys; the API server's decoder refuses them."""


def _mapping(loader, node, deep=False):
    seen = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, "duplicate key %r" % (key,), key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)


def parse(text, file):
    """The documents of one file; empty documents (a trailing ---) are skipped."""
    docs = []
    for i, body in enumerate(yaml.load_all(text, Loader=UniqueKeyLoader), 1):
        if body is not None:
            docs.append(Doc(file, i, body))
    return docs


def load_dir(directory):
    names = sorted(n for n in os.listdir(directory) if n.endswith('.yaml'))
    docs, problems = [], []
    for n in names:
        with open(os.path.join(directory, n), encoding='utf-8') as f:
            text = f.read()
        try:
            docs += parse(text, n)
        except yaml.YAMLError as e:
            problems.append("%s: not valid YAML: %s" % (n, str(e).replace('\n', ' ')))
    return names, docs, problems


# ----------------------------------------------------------------------------------------------
# Type checking

def type_name(v):
    if v is None:
        return 'null'
    if isinstance(v, bool):
        return 'boolean'
    if isinstance(v, int):
        return 'integer'
    if isinstance(v, float):
        return 'number'
    if isinstance(v, str):
        return 'string'
    if isinstance(v, list):
        return 'list'
    if isinstance(v, dict):
        return 'object'
    return type(v).__name__


class Problems:
    def __init__(self):
        self.items = []   # (doc, path, message)

    def add(self, doc, path, message):
        self.items.append((doc, path, message))

    def lines(self):
        out = []
        for doc, path, message in self.items:
            out.append("%s: document %d (%s): %s: %s"
                       % (doc.file, doc.index, doc.label(), path or '(document)', message))
        return out


def check_value(doc, value, typ, path, probs, cels):
    if value is None:
        probs.add(doc, path, "null value (leave the field out instead)")
        return
    if typ[0] == '[':
        if not isinstance(value, list):
            probs.add(doc, path, "expected a list, found %s" % type_name(value))
            return
        for i, item in enumerate(value):
            check_value(doc, item, typ[1:-1], "%s[%d]" % (path, i), probs, cels)
    elif typ[0] == '{':
        if not isinstance(value, dict):
            probs.add(doc, path, "expected an object (map), found %s" % type_name(value))
            return
        for k, v in value.items():
            if not isinstance(k, str):
                probs.add(doc, path, "map key %r is not a string" % (k,))
                continue
            check_value(doc, v, typ[1:-1], "%s[%s]" % (path, k), probs, cels)
    elif typ in ('string', 'cel'):
        if not isinstance(value, str):
            probs.add(doc, path, "expected a string, found %s" % type_name(value))
        elif typ == 'cel':
            cels.append((doc, path, value))
    elif typ == 'int':
        if isinstance(value, bool) or not isinstance(value, int):
            probs.add(doc, path, "expected an integer, found %s" % type_name(value))
    elif typ == 'bool':
        if not isinstance(value, bool):
            probs.add(doc, path, "expected a boolean, found %s" % type_name(value))
    elif typ == 'quantity':
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            probs.add(doc, path, "expected a quantity (string or number), found %s"
                      % type_name(value))
    elif typ == 'intOrString':
        if isinstance(value, bool) or not isinstance(value, (str, int)):
            probs.add(doc, path, "expected an integer or a string, found %s" % type_name(value))
    elif typ == 'any':
        pass
    elif typ == 'object':
        if not isinstance(value, dict):
            probs.add(doc, path, "expected an object, found %s" % type_name(value))
    else:
        check_struct(doc, value, typ, path, probs, cels)


def check_struct(doc, value, struct, path, probs, cels, skip=()):
    if not isinstance(value, dict):
        probs.add(doc, path, "expected an object (%s), found %s" % (struct, type_name(value)))
        return
    fields = fields_of(struct)
    prefix = path + '.' if path else ''
    for k, v in value.items():
        if k in skip:
            continue
        if k not in fields:
            probs.add(doc, prefix + str(k), "unknown field (not in %s)" % struct)
            continue
        check_value(doc, v, fields[k][0], prefix + k, probs, cels)
    for k, (_, required) in fields.items():
        if required and k not in value:
            probs.add(doc, prefix + k, "missing required field (of %s)" % struct)
    for group in one_of_groups(struct):
        present = [f for f in group if f in value]
        if len(present) != 1:
            where = path or '(document)'
            if present:
                probs.add(doc, where, "only one of %s may be set, found %s"
                          % (", ".join(group), ", ".join(present)))
            elif len(group) == 1:
                probs.add(doc, prefix + group[0], "missing required field (of %s)" % struct)
            else:
                probs.add(doc, where, "one of %s must be set" % ", ".join(group))


def check_document(doc, probs, cels):
    body = doc.body
    if not isinstance(body, dict):
        probs.add(doc, '', "a document must be an object, found %s" % type_name(body))
        return None
    api, kind = body.get('apiVersion'), body.get('kind')
    for key, val in (('apiVersion', api), ('kind', kind)):
        if val is None:
            probs.add(doc, key, "missing required field")
        elif not isinstance(val, str):
            probs.add(doc, key, "expected a string, found %s" % type_name(val))
    if not isinstance(api, str) or not isinstance(kind, str):
        return None
    if (api, kind) not in KINDS:
        probs.add(doc, 'kind', "no schema for apiVersion %s, kind %s (known: %s)"
                  % (api, kind, ", ".join("%s %s" % k for k in sorted(KINDS))))
        return None
    root, namespaced = KINDS[(api, kind)]
    check_struct(doc, body, root, '', probs, cels, skip=('apiVersion', 'kind'))
    if not isinstance(doc.name, str) or not doc.name:
        probs.add(doc, 'metadata.name', "missing: every object here needs a name")
    ns = doc.namespace
    if not namespaced and ns is not None:
        probs.add(doc, 'metadata.namespace', "%s is cluster-scoped: no namespace" % kind)
    return namespaced


# ----------------------------------------------------------------------------------------------
# CEL: a lexical check (a full CEL parser is beyond an offline test's needs): string literals
# (', ", ''' and """, r/b prefixes, backslash escapes), // comments, and (), [], {} nesting.

CEL_PAIRS = {')': '(', ']': '[', '}': '{'}


def cel_scan(expr):
    """(string literals, error or None)."""
    literals, stack = [], []
    i, n = 0, len(expr)
    while i < n:
        c = expr[i]
        if expr.startswith('//', i):
            j = expr.find('\n', i)
            i = n if j < 0 else j
            continue
        if c in '\'"':
            # A prefix r, b, rb or br right before the quote, itself not part of an identifier.
            p = i
            while p > 0 and i - p < 2 and expr[p - 1] in 'rRbB':
                p -= 1
            if p > 0 and (expr[p - 1].isalnum() or expr[p - 1] == '_'):
                p = i
            raw = 'r' in expr[p:i].lower()
            q = expr[i:i + 3] if expr[i:i + 3] in ("'''", '"""') else c
            k = start = i + len(q)
            while True:
                if k >= n:
                    return literals, "unterminated string literal at offset %d" % i
                if not raw and expr[k] == '\\':
                    k += 2
                    continue
                if expr.startswith(q, k):
                    break
                if len(q) == 1 and expr[k] == '\n':
                    return literals, "unterminated string literal at offset %d (newline)" % i
                k += 1
            literals.append(expr[start:k])
            i = k + len(q)
            continue
        if c in '([{':
            stack.append((c, i))
        elif c in ')]}':
            if not stack or stack[-1][0] != CEL_PAIRS[c]:
                return literals, "unbalanced '%s' at offset %d" % (c, i)
            stack.pop()
        i += 1
    if stack:
        return literals, "unclosed '%s' at offset %d" % stack[-1]
    return literals, None


DRIVER_TEST = re.compile(r'device\s*\.\s*driver\s*==\s*(["\'])%s\1' % re.escape(DRIVER))
ATTR_DOMAIN = re.compile(r'device\s*\.\s*(attributes|capacity)\s*\[\s*(["\'])(.*?)\2\s*\]')


def check_cel(cels, probs):
    for doc, path, expr in cels:
        _, err = cel_scan(expr)
        if err:
            probs.add(doc, path, "CEL: " + err)
            continue
        # The driver by device.driver, not merely as the attributes' domain: a class that
        # tests only an attribute would match another driver's devices that share its name.
        if doc.kind == 'DeviceClass' and not DRIVER_TEST.search(expr):
            probs.add(doc, path, 'CEL: a DeviceClass selector must name the driver "%s"'
                      % DRIVER)
        # device.attributes is keyed by domain: the qualified "domain/name" form is a mistake
        # that never matches (the map lookup gives an empty map).
        for m in ATTR_DOMAIN.finditer(expr):
            if '/' in m.group(3):
                probs.add(doc, path, "CEL: device.%s[%r] takes a domain, not a qualified name"
                          % (m.group(1), m.group(3)))


# ----------------------------------------------------------------------------------------------
# References between the documents

def get(obj, *keys):
    for k in keys:
        if isinstance(obj, dict):
            obj = obj.get(k)
        elif isinstance(obj, list) and isinstance(k, int) and 0 <= k < len(obj):
            obj = obj[k]
        else:
            return None
    return obj


def items(obj, *keys):
    v = get(obj, *keys)
    return list(enumerate(v)) if isinstance(v, list) else []


SA_USERNAME = re.compile(r'system:serviceaccount:([a-z0-9.-]+):([a-z0-9.-]+)')


def check_toleration(d, t, path, probs):
    """A DeviceToleration as resource.k8s.io/v1's validation takes it (1.37): operator Exists
    or Equal (the default), Exists without a value, an empty key only with Exists, effect
    NoSchedule or NoExecute when given."""
    if not isinstance(t, dict):
        return
    op = t.get('operator', 'Equal')
    if op not in ('Exists', 'Equal'):
        probs.add(d, path + '.operator', "must be Exists or Equal")
    if op == 'Exists' and t.get('value'):
        probs.add(d, path + '.value', "must be empty with operator Exists")
    if not t.get('key') and op != 'Exists':
        probs.add(d, path + '.key', "an empty key matches every taint only with operator Exists")
    key = t.get('key')
    if key and not re.match(r'^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?'
                            r'[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$', str(key)):
        probs.add(d, path + '.key', "must be a label name ([prefix/]name)")
    if t.get('effect') not in (None, 'NoSchedule', 'NoExecute'):
        probs.add(d, path + '.effect', "must be NoSchedule or NoExecute")


def check_references(docs, scoped, probs):
    index = {}
    for d in docs:
        if d.kind is None or not isinstance(d.name, str) or d not in scoped:
            continue
        key = (d.kind, d.namespace if scoped[d] else None, d.name)
        if key in index:
            o = index[key]
            probs.add(d, 'metadata.name', "%s %s is defined twice (also %s document %d)"
                      % (d.kind, d.name, o.file, o.index))
        index.setdefault(key, d)
    namespaces = {d.name for d in docs if d.kind == 'Namespace'}
    # The resources a KubeVirt CR here permits (pciHostDevices and mediatedDevices); None
    # without one, when a VM's deviceName cannot be checked.
    permitted = None
    for d in docs:
        if d.kind == 'KubeVirt':
            permitted = permitted or set()
            for lst in ('pciHostDevices', 'mediatedDevices'):
                permitted |= {get(e, 'resourceName') for _, e in
                              items(d.body, 'spec', 'configuration', 'permittedHostDevices', lst)}

    def has(kind, name, ns=None):
        return (kind, ns, name) in index

    def ns_defined(doc, path, ns):
        if ns is not None and ns not in namespaces and ns not in EXTERNAL_NAMESPACES:
            probs.add(doc, path, "namespace %s is neither defined here nor one of %s"
                      % (ns, ", ".join(sorted(EXTERNAL_NAMESPACES))))

    for d in docs:
        b = d.body
        if d not in scoped:
            continue
        if scoped[d]:
            ns_defined(d, 'metadata.namespace', d.namespace)
        if d.kind == 'ClusterRoleBinding':
            ref = get(b, 'roleRef')
            if isinstance(ref, dict):
                if ref.get('apiGroup') != 'rbac.authorization.k8s.io':
                    probs.add(d, 'roleRef.apiGroup', "must be rbac.authorization.k8s.io")
                if ref.get('kind') != 'ClusterRole':
                    probs.add(d, 'roleRef.kind', "a ClusterRoleBinding refers to a ClusterRole")
                elif not has('ClusterRole', ref.get('name')):
                    probs.add(d, 'roleRef.name', "no ClusterRole %s here" % ref.get('name'))
            for i, s in items(b, 'subjects'):
                if get(s, 'kind') == 'ServiceAccount':
                    p = 'subjects[%d]' % i
                    if get(s, 'namespace') is None:
                        probs.add(d, p + '.namespace',
                                  "a ServiceAccount subject needs its namespace")
                    elif not has('ServiceAccount', get(s, 'name'), get(s, 'namespace')):
                        probs.add(d, p + '.name', "no ServiceAccount %s/%s here"
                                  % (get(s, 'namespace'), get(s, 'name')))
        if d.kind == 'DaemonSet':
            pod = get(b, 'spec', 'template', 'spec')
            sa = get(pod, 'serviceAccountName')
            if sa is not None and not has('ServiceAccount', sa, d.namespace):
                probs.add(d, 'spec.template.spec.serviceAccountName',
                          "no ServiceAccount %s/%s here" % (d.namespace, sa))
            sel = get(b, 'spec', 'selector', 'matchLabels') or {}
            labels = get(b, 'spec', 'template', 'metadata', 'labels') or {}
            if isinstance(sel, dict) and isinstance(labels, dict):
                for k, v in sel.items():
                    if labels.get(k) != v:
                        probs.add(d, 'spec.selector.matchLabels[%s]' % k,
                                  "the pod template's labels do not match the selector")
            volumes = {get(v, 'name') for _, v in items(pod, 'volumes')}
            for ci, c in items(pod, 'containers'):
                for mi, m in items(c, 'volumeMounts'):
                    if get(m, 'name') not in volumes:
                        probs.add(d, 'spec.template.spec.containers[%d].volumeMounts[%d].name'
                                  % (ci, mi), "no volume %s in the pod" % get(m, 'name'))
        if d.kind == 'ResourceClaimTemplate':
            for i, r in items(b, 'spec', 'spec', 'devices', 'requests'):
                p = 'spec.spec.devices.requests[%d]' % i
                subs = [(p + '.exactly', get(r, 'exactly'))]
                subs += [(p + '.firstAvailable[%d]' % j, s)
                         for j, s in items(r, 'firstAvailable')]
                for sp, sub in subs:
                    cls = get(sub, 'deviceClassName')
                    if isinstance(sub, dict) and cls is not None and not has('DeviceClass', cls):
                        probs.add(d, sp + '.deviceClassName', "no DeviceClass %s here" % cls)
                    mode = get(sub, 'allocationMode')
                    if mode is not None and mode not in ('ExactCount', 'All'):
                        probs.add(d, sp + '.allocationMode', "must be ExactCount or All")
                    for k, t in items(sub, 'tolerations'):
                        check_toleration(d, t, '%s.tolerations[%d]' % (sp, k), probs)
        if d.kind in ('VirtualMachine', 'VirtualMachineInstance'):
            base = 'spec.template.spec' if d.kind == 'VirtualMachine' else 'spec'
            spec = get(b, *base.split('.'))
            claims = {}
            for i, rc in items(spec, 'resourceClaims'):
                tmpl = get(rc, 'resourceClaimTemplateName')
                p = '%s.resourceClaims[%d]' % (base, i)
                if tmpl is not None:
                    t = index.get(('ResourceClaimTemplate', d.namespace, tmpl))
                    if t is None:
                        probs.add(d, p + '.resourceClaimTemplateName',
                                  "no ResourceClaimTemplate %s in the VM's namespace here" % tmpl)
                    claims[get(rc, 'name')] = t
                elif get(rc, 'resourceClaimName') is not None:
                    probs.add(d, p + '.resourceClaimName',
                              "ResourceClaim %s is not defined here (no schema for it)"
                              % get(rc, 'resourceClaimName'))
                    claims[get(rc, 'name')] = None
            for devs in ('hostDevices', 'gpus'):
                for i, hd in items(spec, 'domain', 'devices', devs):
                    p = '%s.domain.devices.%s[%d]' % (base, devs, i)
                    cn, rn = get(hd, 'claimName'), get(hd, 'requestName')
                    dn = get(hd, 'deviceName')
                    if dn is not None and (cn is not None or rn is not None):
                        probs.add(d, p, "deviceName (a device plugin's) and claimName/"
                                  "requestName (a claim's) exclude each other")
                    if dn is not None and permitted is not None and dn not in permitted:
                        probs.add(d, p + '.deviceName', "%s is no resourceName of the KubeVirt "
                                  "CR's permittedHostDevices here" % dn)
                    if cn is None and rn is None:
                        continue
                    if cn is None or rn is None:
                        probs.add(d, p, "claimName and requestName go together")
                        continue
                    if cn not in claims:
                        probs.add(d, p + '.claimName', "no resourceClaims entry %s" % cn)
                        continue
                    t = claims[cn]
                    if t is not None:
                        reqs = {get(r, 'name')
                                for _, r in items(t.body, 'spec', 'spec', 'devices', 'requests')}
                        if rn not in reqs:
                            probs.add(d, p + '.requestName', "ResourceClaimTemplate %s has no "
                                      "request %s" % (t.name, rn))
            volumes = {get(v, 'name') for _, v in items(spec, 'volumes')}
            for i, disk in items(spec, 'domain', 'devices', 'disks'):
                if get(disk, 'name') not in volumes:
                    probs.add(d, '%s.domain.devices.disks[%d].name' % (base, i),
                              "no volume %s" % get(disk, 'name'))
        if d.kind == 'ValidatingAdmissionPolicyBinding':
            pn = get(b, 'spec', 'policyName')
            if pn is not None and not has('ValidatingAdmissionPolicy', pn):
                probs.add(d, 'spec.policyName', "no ValidatingAdmissionPolicy %s here" % pn)
        if d.kind == 'ValidatingAdmissionPolicy':
            for section in ('matchConditions', 'variables', 'validations'):
                for i, e in items(b, 'spec', section):
                    for field in ('expression', 'messageExpression'):
                        expr = get(e, field)
                        if not isinstance(expr, str):
                            continue
                        for m in SA_USERNAME.finditer(expr):
                            if not has('ServiceAccount', m.group(2), m.group(1)):
                                probs.add(d, 'spec.%s[%d].%s' % (section, i, field),
                                          "names service account %s/%s, not defined here"
                                          % (m.group(1), m.group(2)))


def check_all(docs):
    probs, cels, scoped = Problems(), [], {}
    for d in docs:
        namespaced = check_document(d, probs, cels)
        if namespaced is not None:
            scoped[d] = namespaced
    check_cel(cels, probs)
    check_references(docs, scoped, probs)
    return probs


# ----------------------------------------------------------------------------------------------
# Self-test: mutations of the real documents, each of which must be reported at its path.

def split_path(path):
    """'a.b[0][key.with/dots].c' -> ['a', 'b', 0, 'key.with/dots', 'c'] (the paths reported)."""
    out = []
    for name, sub in re.findall(r'\.?([^.\[\]]+)|\[([^\]]+)\]', path):
        out.append(name if name else int(sub) if sub.isdigit() else sub)
    return out


def mutate(body, path, op, value=None):
    keys = split_path(path)
    parent = body
    for k in keys[:-1]:
        parent = parent[k]
    last = keys[-1]
    if op == 'set':
        parent[last] = value
    elif op == 'del':
        if last not in parent:
            raise KeyError(path)
        del parent[last]
    elif op == 'rename':  # an unknown field next to a known one: value is the new key
        parent[value] = parent.pop(last)


# (what, kind, name, op, path, value, expected path, expected message part)
MUTATIONS = [
    ("toleration operator", 'ResourceClaimTemplate', 'vfiod-gpu-diagnostic', 'set',
     'spec.spec.devices.requests[0].exactly.tolerations[0].operator', 'exists',
     'spec.spec.devices.requests[0].exactly.tolerations[0].operator', 'must be Exists or Equal'),
    ("toleration effect", 'ResourceClaimTemplate', 'vfiod-gpu-diagnostic', 'set',
     'spec.spec.devices.requests[0].exactly.tolerations[0].effect', 'PreferNoSchedule',
     'spec.spec.devices.requests[0].exactly.tolerations[0].effect', 'NoSchedule or NoExecute'),
    ("toleration value with Exists", 'ResourceClaimTemplate', 'vfiod-gpu-diagnostic', 'set',
     'spec.spec.devices.requests[0].exactly.tolerations[0].value', 'aer-fatal',
     'spec.spec.devices.requests[0].exactly.tolerations[0].value', 'must be empty'),
    ("toleration in the v1beta1 place", 'ResourceClaimTemplate', 'vfiod-gpu-diagnostic', 'set',
     'spec.spec.devices.requests[0].tolerations', [{'key': 'vfiod.io/unhealthy'}],
     'spec.spec.devices.requests[0].tolerations', 'unknown field'),
    ("unknown field", 'DaemonSet', 'vfiod-dra-plugin', 'rename',
     'spec.template.spec.containers[0].volumeMounts', 'volumeMount',
     'spec.template.spec.containers[0].volumeMount', 'unknown field'),
    ("unknown field (VM claim, old alpha spelling)", 'VirtualMachine', 'vm-dra-gpu', 'set',
     'spec.template.spec.domain.devices.hostDevices[0].claim', {'name': 'gpu'},
     'spec.template.spec.domain.devices.hostDevices[0].claim', 'unknown field'),
    ("unknown field (claim template, v1beta1 shape)", 'ResourceClaimTemplate', 'vfiod-gpu',
     'set', 'spec.spec.devices.requests[0].deviceClassName', 'vfiod-gpu',
     'spec.spec.devices.requests[0].deviceClassName', 'unknown field'),
    ("wrong type (string for int)", 'DaemonSet', 'vfiod-dra-plugin', 'set',
     'spec.template.spec.terminationGracePeriodSeconds', '10',
     'spec.template.spec.terminationGracePeriodSeconds', 'expected an integer'),
    ("wrong type (unquoted true in a label map)", 'DaemonSet', 'vfiod-dra-plugin', 'set',
     'spec.template.spec.nodeSelector[vfiod.io/host]', True,
     'spec.template.spec.nodeSelector[vfiod.io/host]', 'expected a string'),
    ("wrong type (string for list)", 'ClusterRole', 'vfiod-dra-plugin', 'set',
     'rules[0].verbs', 'get', 'rules[0].verbs', 'expected a list'),
    ("wrong type (bool for int)", 'ResourceClaimTemplate', 'vfiod-gpu', 'set',
     'spec.spec.devices.requests[0].exactly.count', True,
     'spec.spec.devices.requests[0].exactly.count', 'expected an integer'),
    ("null value", 'DaemonSet', 'vfiod-dra-plugin', 'set',
     'spec.template.spec.tolerations', None, 'spec.template.spec.tolerations', 'null value'),
    ("missing required field", 'ResourceClaimTemplate', 'vfiod-gpu', 'del',
     'spec.spec.devices.requests[0].exactly.deviceClassName', None,
     'spec.spec.devices.requests[0].exactly.deviceClassName', 'missing required field'),
    ("missing required field", 'ValidatingAdmissionPolicyBinding',
     'vfiod-dra-plugin-resourceslices', 'del', 'spec.validationActions', None,
     'spec.validationActions', 'missing required field'),
    ("missing required field", 'DaemonSet', 'vfiod-dra-plugin', 'del',
     'spec.template.spec.volumes[0].hostPath.path', None,
     'spec.template.spec.volumes[0].hostPath.path', 'missing required field'),
    ("missing required field (device plugin's DaemonSet)", 'DaemonSet', 'vfiod-device-plugin',
     'del', 'spec.template.spec.containers[0].name', None,
     'spec.template.spec.containers[0].name', 'missing required field'),
    ("missing required field (KubeVirt CR)", 'KubeVirt', 'kubevirt', 'del',
     'spec.configuration.permittedHostDevices.pciHostDevices[0].resourceName', None,
     'spec.configuration.permittedHostDevices.pciHostDevices[0].resourceName',
     'missing required field'),
    ("missing required field (KubeVirt CR, mdev)", 'KubeVirt', 'kubevirt', 'del',
     'spec.configuration.permittedHostDevices.mediatedDevices[0].mdevNameSelector', None,
     'spec.configuration.permittedHostDevices.mediatedDevices[0].mdevNameSelector',
     'missing required field'),
    ("unknown field (KubeVirt CR, mdev selector spelling)", 'KubeVirt', 'kubevirt', 'rename',
     'spec.configuration.permittedHostDevices.mediatedDevices[0].mdevNameSelector',
     'mdevSelector', 'spec.configuration.permittedHostDevices.mediatedDevices[0].mdevSelector',
     'unknown field'),
    ("wrong type (mdev handling's enabled)", 'KubeVirt', 'kubevirt', 'set',
     'spec.configuration.mediatedDevicesConfiguration', {'enabled': 'false'},
     'spec.configuration.mediatedDevicesConfiguration.enabled', 'expected a boolean'),
    ("wrong type (vGPU display)", 'VirtualMachine', 'vm-vgpu', 'set',
     'spec.template.spec.domain.devices.gpus[0].virtualGPUOptions.display', 'off',
     'spec.template.spec.domain.devices.gpus[0].virtualGPUOptions.display',
     'expected an object'),
    ("dangling: VM gpu -> permitted resource", 'VirtualMachine', 'vm-vgpu', 'set',
     'spec.template.spec.domain.devices.gpus[0].deviceName', 'nvidia.com/GRID_T4-8Q',
     'spec.template.spec.domain.devices.gpus[0].deviceName', 'no resourceName'),
    ("deviceName with a claim", 'VirtualMachine', 'vm-dra-vgpu', 'set',
     'spec.template.spec.domain.devices.gpus[0].deviceName', 'nvidia.com/GRID_T4-1Q',
     'spec.template.spec.domain.devices.gpus[0]', 'exclude each other'),
    ("dangling: VM gpu -> claim", 'VirtualMachine', 'vm-dra-vgpu', 'set',
     'spec.template.spec.domain.devices.gpus[0].claimName', 'other',
     'spec.template.spec.domain.devices.gpus[0].claimName', 'no resourceClaims entry'),
    ("dangling: vGPU claim template -> DeviceClass", 'ResourceClaimTemplate', 'vfiod-vgpu',
     'set', 'spec.spec.devices.requests[0].exactly.deviceClassName', 'vfiod-vgpu-t4-8q',
     'spec.spec.devices.requests[0].exactly.deviceClassName', 'no DeviceClass'),
    ("one-of: exactly and firstAvailable", 'ResourceClaimTemplate', 'vfiod-gpu', 'set',
     'spec.spec.devices.requests[0].firstAvailable',
     [{'name': 'a', 'deviceClassName': 'vfiod-gpu'}],
     'spec.spec.devices.requests[0]', 'only one of'),
    ("missing apiVersion", 'ServiceAccount', 'vfiod-dra-plugin', 'del', 'apiVersion', None,
     'apiVersion', 'missing required field'),
    ("kind without a schema", 'DeviceClass', 'vfiod-gpu', 'set', 'apiVersion',
     'resource.k8s.io/v1beta1', 'kind', 'no schema'),
    ("namespace on a cluster-scoped object", 'ClusterRole', 'vfiod-dra-plugin', 'set',
     'metadata.namespace', 'vfiod', 'metadata.namespace', 'cluster-scoped'),
    ("dangling: binding -> ServiceAccount", 'ClusterRoleBinding', 'vfiod-dra-plugin', 'set',
     'subjects[0].name', 'nobody', 'subjects[0].name', 'no ServiceAccount'),
    ("dangling: binding -> ClusterRole", 'ClusterRoleBinding', 'vfiod-dra-plugin', 'set',
     'roleRef.name', 'nothing', 'roleRef.name', 'no ClusterRole'),
    ("dangling: DaemonSet -> ServiceAccount", 'DaemonSet', 'vfiod-dra-plugin', 'set',
     'spec.template.spec.serviceAccountName', 'nobody',
     'spec.template.spec.serviceAccountName', 'no ServiceAccount'),
    ("dangling: volumeMount -> volume", 'DaemonSet', 'vfiod-dra-plugin', 'set',
     'spec.template.spec.containers[0].volumeMounts[0].name', 'nowhere',
     'spec.template.spec.containers[0].volumeMounts[0].name', 'no volume'),
    ("dangling: claim template -> DeviceClass", 'ResourceClaimTemplate', 'vfiod-gpu', 'set',
     'spec.spec.devices.requests[0].exactly.deviceClassName', 'no-such-class',
     'spec.spec.devices.requests[0].exactly.deviceClassName', 'no DeviceClass'),
    ("dangling: VM host device -> claim", 'VirtualMachine', 'vm-dra-gpu', 'set',
     'spec.template.spec.domain.devices.hostDevices[0].claimName', 'other',
     'spec.template.spec.domain.devices.hostDevices[0].claimName', 'no resourceClaims entry'),
    ("dangling: VM host device -> request", 'VirtualMachine', 'vm-dra-gpu', 'set',
     'spec.template.spec.domain.devices.hostDevices[0].requestName', 'other',
     'spec.template.spec.domain.devices.hostDevices[0].requestName', 'has no request'),
    ("dangling: VM claim -> template", 'VirtualMachine', 'vm-dra-gpu', 'set',
     'spec.template.spec.resourceClaims[0].resourceClaimTemplateName', 'none',
     'spec.template.spec.resourceClaims[0].resourceClaimTemplateName',
     'no ResourceClaimTemplate'),
    ("dangling: policy binding -> policy", 'ValidatingAdmissionPolicyBinding',
     'vfiod-dra-plugin-resourceslices', 'set', 'spec.policyName', 'none', 'spec.policyName',
     'no ValidatingAdmissionPolicy'),
    ("dangling: policy -> service account", 'ValidatingAdmissionPolicy',
     'vfiod-dra-plugin-resourceslices', 'set', 'spec.matchConditions[0].expression',
     'request.userInfo.username == "system:serviceaccount:vfiod:someone-else"',
     'spec.matchConditions[0].expression', 'not defined here'),
    ("CEL: unbalanced quote", 'DeviceClass', 'vfiod-gpu', 'set',
     'spec.selectors[0].cel.expression', 'device.driver == "vfio.vfiod.io',
     'spec.selectors[0].cel.expression', 'unterminated string'),
    ("CEL: unbalanced bracket", 'ValidatingAdmissionPolicy', 'vfiod-dra-plugin-resourceslices',
     'set', 'spec.validations[0].expression', '(variables.tokenNode != ""',
     'spec.validations[0].expression', "unclosed '('"),
    ("CEL: DeviceClass without the driver", 'DeviceClass', 'vfiod-gpu', 'set',
     'spec.selectors[0].cel.expression', 'device.driver == "gpu.example.com"',
     'spec.selectors[0].cel.expression', 'must name the driver'),
    ("CEL: vGPU class without the driver", 'DeviceClass', 'vfiod-vgpu-t4-1q', 'set',
     'spec.selectors[0].cel.expression',
     'device.attributes["vfio.vfiod.io"].type == "nvidia-222"',
     'spec.selectors[0].cel.expression', 'must name the driver'),
    ("CEL: qualified attribute name", 'DeviceClass', 'vfiod-gpu', 'set',
     'spec.selectors[0].cel.expression',
     'device.driver == "vfio.vfiod.io" && '
     'device.attributes["vfio.vfiod.io/resourceName"] == "x"',
     'spec.selectors[0].cel.expression', 'takes a domain'),
]


def self_test(docs):
    failures = []
    base = check_all(docs)
    if base.items:
        failures.append("the unmutated documents are not clean:\n  " + "\n  ".join(base.lines()))
    for what, kind, name, op, path, value, want_path, want_msg in MUTATIONS:
        copies = copy.deepcopy(docs)
        target = [d for d in copies if d.kind == kind and d.name == name]
        if len(target) != 1:
            failures.append("%s: no single %s %s to mutate (found %d)"
                            % (what, kind, name, len(target)))
            continue
        try:
            mutate(target[0].body, path, op, copy.deepcopy(value))
        except (KeyError, IndexError, TypeError) as e:
            failures.append("%s: %s %s has no %s (%s)" % (what, kind, name, path, e))
            continue
        got = check_all(copies)
        hit = [(d, p, m) for d, p, m in got.items
               if d.kind in (kind, None) and p == want_path and want_msg in m]
        if not hit:
            failures.append("%s: %s %s %s %s was not reported at %s (%r); got:\n  %s"
                            % (what, op, kind, name, path, want_path, want_msg,
                               "\n  ".join(got.lines()) or "(nothing)"))
        else:
            print("ok: %-48s %s" % (what, got.lines()[got.items.index(hit[0])]))
    # YAML-level mistakes, on text of their own.
    for what, text, want in [
        ("duplicate key", "apiVersion: v1\nkind: Namespace\nmetadata: {name: a}\nkind: x\n",
         "duplicate key"),
    ]:
        try:
            parse(text, 'self-test')
            failures.append("%s: not refused" % what)
        except yaml.YAMLError as e:
            if want not in str(e):
                failures.append("%s: refused for another reason: %s" % (what, e))
            else:
                print("ok: %-48s %s" % (what, str(e).splitlines()[0]))
    for what, text, want_path, want in [
        ("document that is not an object", "- a\n- b\n", '', 'must be an object'),
        ("unknown kind", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n", 'kind',
         'no schema'),
    ]:
        got = check_all(parse(text, 'self-test'))
        if not any(p == want_path and want in m for _, p, m in got.items):
            failures.append("%s: not reported; got %s" % (what, got.lines()))
        else:
            print("ok: %-48s %s" % (what, got.lines()[0]))
    return failures


def main(argv):
    args = argv[1:]
    if '--help' in args or '-h' in args:
        print(__doc__.strip())
        return 0
    selftest = '--self-test' in args
    args = [a for a in args if a != '--self-test']
    if len(args) != 1 or args[0].startswith('-'):
        print("usage: check_manifests.py [--self-test] DIR", file=sys.stderr)
        return 2
    _check_tables()
    try:
        names, docs, problems = load_dir(args[0])
    except OSError as e:
        print("check_manifests.py: %s" % e, file=sys.stderr)
        return 2
    if not names:
        print("check_manifests.py: no *.yaml in %s" % args[0], file=sys.stderr)
        return 2
    if problems:
        print("\n".join(problems))
        return 1
    probs = check_all(docs)
    if probs.items:
        print("\n".join(probs.lines()))
        print("%d problem(s) in %s" % (len(probs.items), args[0]))
        return 1
    print("%d documents in %s: clean" % (len(docs), ", ".join(names)))
    if selftest:
        failures = self_test(docs)
        if failures:
            print("SELF-TEST FAILED:\n" + "\n".join(failures))
            return 1
        print("self-test: %d mutations of %d documents in %s, each reported"
              % (len(MUTATIONS) + 3, len(docs), ", ".join(names)))
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
