// The device-metadata files of a prepared claim (DESIGN §10, KEP-5304): one per request the pod
// names, DeviceMetadata of metadata.resource.k8s.io/v1alpha1 listing the request's devices with
// their attributes (the ResourceSlice's: api_objects.hpp), kept in the state directory and bound
// read-only into the container (cdi.hpp), where KubeVirt reads a function's pciBusID.
#pragma once

#include <string>
#include <vector>

#include "api_objects.hpp"
#include "devices.hpp"

namespace vfiod::dra {

// A request as the allocation names it: "<request>" or "<request>/<subrequest>" (prioritized
// lists). The metadata file and its container path belong to the request the pod names.
std::string parent_request(const std::string& request);
// Whether the allocation's request name can name a file: one or two safe names.
bool safe_request(const std::string& request);

// Where the plugin keeps a request's metadata file (a host path), and where the container
// sees it: under resourceclaimtemplates/<pod claim> when the claim came from a template,
// resourceclaims/<claim> otherwise.
std::string metadata_host_path(const std::string& state_dir, const std::string& claim_uid,
                               const std::string& request, const std::string& driver);
std::string metadata_container_path(const ResourceClaim& claim, const std::string& request,
                                    const std::string& driver);
// Whether `host_path` is one of the metadata files of claim `uid`: what a checkpoint may list.
bool is_metadata_path(const std::string& host_path, const std::string& state_dir,
                      const std::string& claim_uid, const std::string& driver);

// The file's content for `request` (a parent request) of `claim`: its devices, in this order,
// in `pool` of `driver`.
std::string metadata_file(const ResourceClaim& claim, const std::string& request,
                          const std::string& driver, const std::string& pool,
                          const std::vector<const DraDevice*>& devices);

}  // namespace vfiod::dra
