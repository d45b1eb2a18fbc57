// Who holds a vfio group or device open (io/vfio_use): group nodes, iommufd cdevs and enable
// counts, on groups the executor bound, and the in-use-vfio release refusal that follows.
#include <gtest/gtest.h>

#include <cerrno>

#include "exec_world.hpp"

using namespace vfiod;
using namespace vfiod::test::world;
using vfiod::test::FakeKernel;

TEST(VfioUse, FindsGroupNodesCdevsAndEnabledDevices) {
    World w;
    ASSERT_EQ(w.exec->apply(w.plan(13), Trigger::Automatic).state, Outcome::Bound);
    ASSERT_EQ(w.exec->apply(w.plan(14), Trigger::Automatic).state, Outcome::Bound);
    Topology topo = w.topology();
    HostUse use;
    read_vfio_use(*w.kernel, topo, &use);
    EXPECT_TRUE(use.vfio.empty());  // bound but unused

    // iommufd: the audio function's cdev open by one process.
    w.tree.write_file(w.tree.devpath(kAudio) + "/vfio-dev/vfio3/dev", "511:3\n");
    w.tree.write_file("proc/77/comm", "cloud-hypervisor\n");
    w.tree.symlink("proc/77/fd/5", "/dev/vfio/devices/vfio3");
    // A device a user enabled (the group fd passed on and closed, the device fd kept).
    w.tree.write_file(w.tree.devpath(kNic) + "/enable", "1\n");
    // Unrelated fds and a host-driver function's enable count mean nothing.
    w.tree.symlink("proc/78/fd/1", "/dev/vfio/vfio");
    w.tree.symlink("proc/78/fd/2", "/dev/vfio/99");
    read_vfio_use(*w.kernel, topo, &use);
    ASSERT_EQ(use.vfio.size(), 2u);
    ASSERT_EQ(use.vfio.count(A(kAudio)), 1u);
    EXPECT_NE(use.vfio[A(kAudio)][0].find("cloud-hypervisor"), std::string::npos);
    ASSERT_EQ(use.vfio.count(A(kNic)), 1u);
    EXPECT_NE(use.vfio[A(kNic)][0].find("enable=1"), std::string::npos);
    EXPECT_EQ(plan_release(topo, use, 14, {}).reason, Reason::InUseVfio);
}

