// vfiod: binds allowlisted PCI devices' IOMMU groups to vfio-pci and publishes them on D-Bus.
// The command line only; the daemon is daemon/app's Daemon, the work daemon/service's.
#include "app/daemon.hpp"
#include "io/host_fs.hpp"

int main(int argc, char** argv) {
    vfiod::DaemonOptions options;
    if (auto code = vfiod::begin_vfiod(argc, argv, &options))
        return *code;
    vfiod::KernelHostFs fs(options.root);
    return vfiod::run_daemon(fs, options);
}
