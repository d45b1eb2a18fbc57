// vfiod-dra-plugin's kubelet side (dra-plugin/kubelet.cpp) against the fake DRA kubelet on real
// unix sockets: registration as the plugin watcher sees it, Prepare and Unprepare on the
// kubelet's literal method paths, a registration socket served again after removal, stale
// socket files, bounds on hostile calls and on threads, and the fake kubelet's own CLI.
#include <dirent.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <fstream>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "dra.pb.h"
#include "eventually.hpp"
#include "fake_dra_kubelet.hpp"
#include "kubelet.hpp"
#include "pluginregistration.pb.h"

namespace {

using vfiod::dra::CallLimit;
using vfiod::dra::ClaimRef;
using vfiod::dra::KubeletServers;
using vfiod::dra::PreparedDevice;
using vfiod::dra::PrepareResult;
using vfiod::test::DraClaim;
using vfiod::test::DraDevice;
using vfiod::test::FakeDraKubelet;
namespace fs = std::filesystem;

constexpr const char* kDriver = "vfio.vfiod.io";

// What the fake Prepare answers for a claim named "ok-…": one device named after the UID.
std::vector<PreparedDevice> devices_for(const std::string& uid) {
    return {{{"vm"}, "node-a", "pci-" + uid, {"vfiod.io/vfio=" + uid + "-dev"}},
            {{"vm", "other"}, "node-a", "pci-" + uid + "-b", {}}};
}
std::vector<DraDevice> wire_devices_for(const std::string& uid) {
    std::vector<DraDevice> out;
    for (const auto& d : devices_for(uid))
        out.push_back({d.requests, d.pool, d.device, d.cdi_ids});
    return out;
}

int thread_count() {
    int n = 0;
    if (DIR* d = opendir("/proc/self/task")) {
        while (dirent* e = readdir(d))
            if (e->d_name[0] != '.')
                ++n;
        closedir(d);
    }
    return n;
}

ino_t inode_of(const std::string& path) {
    struct stat st;
    return stat(path.c_str(), &st) == 0 ? st.st_ino : 0;
}

// A socket file with nobody listening, as a killed plugin leaves behind.
void leave_stale_socket(const std::string& path) {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0) << path;
    close(fd);
}

class DraKubeletTest : public ::testing::Test {
protected:
    void SetUp() override {
        char tmpl[] = "/tmp/vfiod-dra-kubelet-XXXXXX";
        ASSERT_NE(mkdtemp(tmpl), nullptr);
        dir_ = tmpl;
        opts_.driver = kDriver;
        opts_.registrar_dir = dir_ + "/plugins_registry";
        opts_.plugin_dir = dir_ + "/plugins/" + kDriver;
        opts_.dra_endpoint = opts_.plugin_dir + "/dra.sock";
        reg_ = opts_.registrar_dir + "/" + kDriver + "-reg.sock";
        dra_ = opts_.dra_endpoint;
    }
    void TearDown() override {
        servers_.reset();
        std::error_code ec;
        fs::remove_all(dir_, ec);
    }

    // The fake Prepare: by the claim's name, "ok…" prepares, "fail…" is refused, "throw…"
    // throws; every call recorded.
    void make_servers() {
        servers_ = std::make_unique<KubeletServers>(
            opts_,
            [this](const ClaimRef& c, const CallLimit& limit) {
                {
                    std::lock_guard l(mu_);
                    prepared_.push_back(c);
                    limits_.push_back(limit.deadline);
                }
                const int now = ++inside_;
                int peak = peak_inside_.load();
                while (now > peak && !peak_inside_.compare_exchange_weak(peak, now)) {
                }
                if (prepare_work_.count() > 0)
                    std::this_thread::sleep_for(prepare_work_);  // stands for the work
                {
                    std::unique_lock l(mu_);
                    cv_.wait(l, [&] { return !hold_; });
                }
                --inside_;
                PrepareResult r;
                if (c.name.rfind("fail", 0) == 0)
                    r.error = "claim " + c.namespace_ + "/" + c.name + ": refused on purpose";
                else if (c.name.rfind("throw", 0) == 0)
                    throw std::runtime_error("boom");
                else
                    r.devices = devices_for(c.uid);
                return r;
            },
            [this](const ClaimRef& c, const CallLimit&) -> std::string {
                {
                    std::lock_guard l(mu_);
                    unprepared_.push_back(c);
                }
                if (prepare_work_.count() > 0)
                    std::this_thread::sleep_for(prepare_work_);
                if (c.name.rfind("throw", 0) == 0)
                    throw 42;
                if (c.name.rfind("fail", 0) == 0)
                    return "claim " + c.name + ": cannot unprepare";
                return "";
            });
    }
    void start() {
        if (!servers_)
            make_servers();
        std::string err;
        ASSERT_TRUE(servers_->start(&err)) << err;
    }

    std::string dir_, reg_, dra_;
    KubeletServers::Options opts_;
    std::unique_ptr<KubeletServers> servers_;
    std::mutex mu_;
    std::vector<ClaimRef> prepared_, unprepared_;
    std::vector<std::chrono::steady_clock::time_point> limits_;  // each Prepare's deadline
    std::atomic<int> inside_{0}, peak_inside_{0};
    std::chrono::milliseconds prepare_work_{0};  // each Prepare's and Unprepare's
    std::condition_variable cv_;
    bool hold_ = false;  // Prepare waits while set
    void release() {
        std::lock_guard l(mu_);
        hold_ = false;
        cv_.notify_all();
    }
};

bool wait_for(const std::function<bool()>& pred) {
    return vfiod::test::eventually(pred, std::chrono::seconds(30));
}

TEST_F(DraKubeletTest, RegistrationAnswersExactlyAndRecordsTheVerdict) {
    start();
    EXPECT_FALSE(servers_->registered());
    FakeDraKubelet k;
    vfiod::test::DraPluginInfo info;
    std::string err;
    ASSERT_TRUE(k.register_plugin(reg_, &info, &err)) << err;
    EXPECT_EQ(info.type, "DRAPlugin");
    EXPECT_EQ(info.name, kDriver);
    EXPECT_EQ(info.endpoint, dra_);
    // The DRA service, and the health service in both versions the kubelet knows.
    EXPECT_EQ(info.supported_versions,
              (std::vector<std::string>{"v1.DRAPlugin", "v1.DRAResourceHealth",
                                        "v1alpha1.DRAResourceHealth"}));
    EXPECT_EQ(k.dra_socket(), dra_);
    EXPECT_TRUE(servers_->registered());
    EXPECT_EQ(servers_->registration_error(), "");

    // A kubelet that refuses says why; the plugin keeps the reason.
    pluginregistration::RegistrationStatus st;
    st.set_plugin_registered(false);
    st.set_error("version v1.DRAPlugin not supported");
    pluginregistration::RegistrationStatusResponse resp;
    ASSERT_TRUE(k.call(reg_, vfiod::test::kNotifyMethod, st, &resp).ok());
    EXPECT_FALSE(servers_->registered());
    EXPECT_EQ(servers_->registration_error(), "version v1.DRAPlugin not supported");
}

TEST_F(DraKubeletTest, PrepareAndUnprepareAnswerEachClaimOnItsOwn) {
    start();
    FakeDraKubelet k;
    std::vector<DraClaim> claims = {{"uid-1", "ns1", "ok-a"},
                                    {"uid-2", "ns1", "fail-b"},
                                    {"uid-3", "ns2", "throw-c"},
                                    {"uid-4", "ns2", "ok-d"}};
    auto r = k.prepare(dra_, claims);
    ASSERT_TRUE(r.status.ok()) << r.status.error_message();
    ASSERT_EQ(r.claims.size(), 4u);
    EXPECT_EQ(r.claims["uid-1"].error, "");
    EXPECT_EQ(r.claims["uid-1"].devices, wire_devices_for("uid-1"));
    EXPECT_EQ(r.claims["uid-4"].devices, wire_devices_for("uid-4"));
    EXPECT_EQ(r.claims["uid-2"].error, "claim ns1/fail-b: refused on purpose");
    EXPECT_TRUE(r.claims["uid-2"].devices.empty());
    // An exception is that claim's error, naming it, never the call's.
    EXPECT_NE(r.claims["uid-3"].error.find("ns2/throw-c"), std::string::npos)
        << r.claims["uid-3"].error;
    EXPECT_NE(r.claims["uid-3"].error.find("boom"), std::string::npos);
    {
        std::lock_guard l(mu_);
        ASSERT_EQ(prepared_.size(), 4u);
        EXPECT_EQ(prepared_[0].uid, "uid-1");
        EXPECT_EQ(prepared_[0].namespace_, "ns1");
        EXPECT_EQ(prepared_[0].name, "ok-a");
    }

    auto u = k.unprepare(dra_, claims);
    ASSERT_TRUE(u.status.ok()) << u.status.error_message();
    ASSERT_EQ(u.claims.size(), 4u);
    EXPECT_EQ(u.claims["uid-1"].error, "");
    EXPECT_EQ(u.claims["uid-4"].error, "");
    EXPECT_EQ(u.claims["uid-2"].error, "claim fail-b: cannot unprepare");
    EXPECT_NE(u.claims["uid-3"].error.find("ns2/throw-c"), std::string::npos);
    std::lock_guard l(mu_);
    ASSERT_EQ(unprepared_.size(), 4u);
    EXPECT_EQ(unprepared_[3].uid, "uid-4");
    EXPECT_EQ(unprepared_[3].namespace_, "ns2");
}

TEST_F(DraKubeletTest, AClaimNamedTwiceIsPreparedOnce) {
    start();
    FakeDraKubelet k;
    auto r = k.prepare(dra_, {{"uid-1", "ns", "ok"}, {"uid-1", "ns", "ok"}});
    ASSERT_TRUE(r.status.ok());
    EXPECT_EQ(r.claims.size(), 1u);
    std::lock_guard l(mu_);
    EXPECT_EQ(prepared_.size(), 1u);
}

TEST_F(DraKubeletTest, OtherPackagesAndServicesAreUnimplemented) {
    start();
    FakeDraKubelet k;
    k8s::io::kubelet::pkg::apis::dra::v1::NodePrepareResourcesRequest req;
    auto* c = req.add_claims();
    c->set_uid("uid-1");
    c->set_namespace_("ns");
    c->set_name("ok");
    for (const char* wrong : {"/k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin/NodePrepareResources",
                              "/v1.DRAPlugin/NodePrepareResources",
                              "/k8s.io.kubelet.pkg.apis.dra.v1.Node/NodePrepareResources",
                              "/pluginregistration.Registration/GetInfo"}) {
        std::string out;
        auto s = k.call_bytes(dra_, wrong, req.SerializeAsString(), &out);
        EXPECT_EQ(s.error_code(), grpc::StatusCode::UNIMPLEMENTED) << wrong;
    }
    std::string out;
    EXPECT_EQ(k.call_bytes(reg_, "/pluginregistration.v1.Registration/GetInfo", "", &out)
                  .error_code(),
              grpc::StatusCode::UNIMPLEMENTED);
    std::lock_guard l(mu_);
    EXPECT_TRUE(prepared_.empty());
}

TEST_F(DraKubeletTest, HostileCallsAreRefusedClearly) {
    start();
    FakeDraKubelet k;
    // Absurdly many claims: the whole call refused, no claim touched.
    std::vector<DraClaim> many;
    for (int i = 0; i <= KubeletServers::kMaxClaimsPerCall; ++i)
        many.push_back({"uid-" + std::to_string(i), "ns", "ok"});
    auto r = k.prepare(dra_, many);
    EXPECT_EQ(r.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(r.status.error_message().find(std::to_string(many.size()) + " claims"),
              std::string::npos)
        << r.status.error_message();
    auto u = k.unprepare(dra_, many);
    EXPECT_EQ(u.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);

    // A claim without a UID cannot be answered in a map keyed by UID.
    r = k.prepare(dra_, {{"uid-1", "ns", "ok"}, {"", "ns", "nouid"}});
    EXPECT_EQ(r.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(r.status.error_message().find("ns/nouid"), std::string::npos);

    // A UID or name that could escape a file name: that claim's error, the others served.
    r = k.prepare(dra_, {{"../../etc", "ns", "ok"},
                         {"uid-2", "ns/..", "ok"},
                         {"uid-3", "ns", std::string(300, 'a')},
                         {"uid-4", "ns", "ok"}});
    ASSERT_TRUE(r.status.ok());
    EXPECT_NE(r.claims["../../etc"].error, "");
    EXPECT_NE(r.claims["uid-2"].error, "");
    EXPECT_NE(r.claims["uid-3"].error, "");
    EXPECT_EQ(r.claims["uid-4"].error, "");

    // Garbage bytes as the request.
    std::string out;
    auto s = k.call_bytes(dra_, vfiod::test::kPrepareMethod, std::string("\xff\xff\xff\x01", 4),
                          &out);
    EXPECT_FALSE(s.ok());
    {
        std::lock_guard l(mu_);
        ASSERT_EQ(prepared_.size(), 1u);
        EXPECT_EQ(prepared_[0].uid, "uid-4");
    }
    // And the server still answers.
    EXPECT_TRUE(k.prepare(dra_, {{"uid-5", "ns", "ok"}}).all_ok({{"uid-5", "ns", "ok"}}));
}

TEST_F(DraKubeletTest, ARemovedOrReplacedRegistrationSocketIsServedAgain) {
    start();
    FakeDraKubelet k;
    vfiod::test::DraPluginInfo info;
    std::string err;
    ASSERT_TRUE(k.register_plugin(reg_, &info, &err)) << err;
    const ino_t first = inode_of(reg_);
    ASSERT_NE(first, 0u);

    // Nothing changed: the same socket stays.
    servers_->check_registration();
    EXPECT_EQ(inode_of(reg_), first);

    // Removed, as a kubelet that restarts may do.
    ASSERT_EQ(unlink(reg_.c_str()), 0);
    servers_->check_registration();
    ASSERT_NE(inode_of(reg_), 0u);
    EXPECT_FALSE(servers_->registered());  // not until the kubelet says so again
    ASSERT_TRUE(k.register_plugin(reg_, &info, &err)) << err;
    EXPECT_EQ(info.endpoint, dra_);
    EXPECT_TRUE(servers_->registered());

    // Replaced by some other socket file, nobody listening (it often has the inode number of
    // the one removed): ours again, and it answers.
    ASSERT_EQ(unlink(reg_.c_str()), 0);
    leave_stale_socket(reg_);
    EXPECT_FALSE(k.register_plugin(reg_, &info, &err));
    servers_->check_registration();
    ASSERT_TRUE(k.register_plugin(reg_, &info, &err)) << err;

    // The whole directory gone: made again.
    fs::remove_all(opts_.registrar_dir);
    servers_->check_registration();
    ASSERT_TRUE(k.register_plugin(reg_, &info, &err)) << err;

    // Cannot be served (a file where the directory goes): no crash, served once it can be.
    fs::remove_all(opts_.registrar_dir);
    { std::ofstream(opts_.registrar_dir) << "x"; }
    servers_->check_registration();
    servers_->check_registration();
    EXPECT_FALSE(k.register_plugin(reg_, &info, &err));
    fs::remove(opts_.registrar_dir);
    servers_->check_registration();
    ASSERT_TRUE(k.register_plugin(reg_, &info, &err)) << err;

    // Prepare was never interrupted.
    EXPECT_TRUE(k.prepare(dra_, {{"uid-1", "ns", "ok"}}).all_ok({{"uid-1", "ns", "ok"}}));
}

TEST_F(DraKubeletTest, StaleSocketFilesAtStartAreReplaced) {
    fs::create_directories(opts_.registrar_dir);
    fs::create_directories(opts_.plugin_dir);
    leave_stale_socket(reg_);
    leave_stale_socket(dra_);
    start();
    FakeDraKubelet k;
    vfiod::test::DraPluginInfo info;
    std::string err;
    ASSERT_TRUE(k.register_plugin(reg_, &info, &err)) << err;
    EXPECT_TRUE(k.prepare(dra_, {{"uid-1", "ns", "ok"}}).all_ok({{"uid-1", "ns", "ok"}}));
}

TEST_F(DraKubeletTest, StartFailsNamingThePath) {
    // Something that is not a socket where a socket goes is not ours to remove.
    fs::create_directories(opts_.plugin_dir);
    { std::ofstream(dra_) << "precious"; }
    make_servers();
    std::string err;
    EXPECT_FALSE(servers_->start(&err));
    EXPECT_NE(err.find(dra_), std::string::npos) << err;
    std::ifstream in(dra_);
    std::string content;
    in >> content;
    EXPECT_EQ(content, "precious");
    EXPECT_FALSE(fs::exists(reg_));

    // A path too long for a unix socket.
    opts_.plugin_dir = dir_ + "/" + std::string(120, 'p');
    make_servers();
    err.clear();
    EXPECT_FALSE(servers_->start(&err));
    EXPECT_NE(err.find(opts_.plugin_dir), std::string::npos) << err;

    // A directory that cannot be made.
    opts_.plugin_dir = dir_ + "/file/sub";
    { std::ofstream(dir_ + "/file") << "x"; }
    make_servers();
    err.clear();
    EXPECT_FALSE(servers_->start(&err));
    EXPECT_NE(err.find(opts_.plugin_dir), std::string::npos) << err;
}

// ---- --root: the sockets' directories beneath it -----------------------------------------

// Everything in `dir` and below, as "name" or "sub/name" ("" when dir is missing).
std::set<std::string> tree_of(const std::string& dir) {
    std::set<std::string> out;
    std::error_code ec;
    for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
        out.insert(fs::relative(it->path(), dir).string());
    return out;
}

// The plugin run with --root: host paths as the kubelet names them, looked up beneath root_;
// outside_ is a directory outside the root holding someone else's sockets, where links planted
// in the tree lead.
class DraKubeletRootTest : public DraKubeletTest {
protected:
    void SetUp() override {
        DraKubeletTest::SetUp();
        root_ = dir_ + "/root";
        outside_ = dir_ + "/outside";
        ASSERT_TRUE(fs::create_directories(root_ + "/var/lib/kubelet/plugins"));
        ASSERT_TRUE(fs::create_directories(outside_));
        opts_.root = root_;
        opts_.registrar_dir = "/var/lib/kubelet/plugins_registry";
        opts_.plugin_dir = std::string("/var/lib/kubelet/plugins/") + kDriver;
        opts_.dra_endpoint = opts_.plugin_dir + "/dra.sock";
        reg_ = root_ + opts_.registrar_dir + "/" + kDriver + "-reg.sock";
        dra_ = root_ + opts_.dra_endpoint;
        foreign_reg_ = outside_ + "/" + kDriver + "-reg.sock";
        foreign_dra_ = outside_ + "/dra.sock";
        leave_stale_socket(foreign_reg_);
        leave_stale_socket(foreign_dra_);
        // A second name for each keeps its inode taken: a socket made after one was removed
        // cannot get its number back and pass for it.
        ASSERT_TRUE(fs::create_directories(dir_ + "/witness"));
        fs::create_hard_link(foreign_reg_, dir_ + "/witness/reg");
        fs::create_hard_link(foreign_dra_, dir_ + "/witness/dra");
        foreign_reg_ino_ = inode_of(foreign_reg_);
        foreign_dra_ino_ = inode_of(foreign_dra_);
        ASSERT_NE(foreign_reg_ino_, 0u);
        ASSERT_NE(foreign_dra_ino_, 0u);
    }

    // Outside the root: the foreign sockets, the very same files, and nothing else.
    void expect_outside_untouched() {
        EXPECT_EQ(tree_of(outside_),
                  (std::set<std::string>{std::string(kDriver) + "-reg.sock", "dra.sock"}));
        EXPECT_EQ(inode_of(foreign_reg_), foreign_reg_ino_);
        EXPECT_EQ(inode_of(foreign_dra_), foreign_dra_ino_);
    }
    void expect_refused(const std::string& dir) {
        make_servers();
        std::string err;
        EXPECT_FALSE(servers_->start(&err));
        EXPECT_NE(err.find(dir), std::string::npos) << err;
        EXPECT_NE(err.find("leads out of the root " + root_), std::string::npos) << err;
        expect_outside_untouched();
        // Nor is a socket left beneath the root (the DRA socket, served first, is gone again).
        for (const auto& f : tree_of(root_))
            EXPECT_FALSE(f.ends_with(".sock")) << f;
        servers_.reset();
        expect_outside_untouched();
    }

    std::string root_, outside_, foreign_reg_, foreign_dra_;
    ino_t foreign_reg_ino_ = 0, foreign_dra_ino_ = 0;
};

TEST_F(DraKubeletRootTest, TheNormalLayoutRegistersAndServes) {
    start();
    FakeDraKubelet k;
    vfiod::test::DraPluginInfo info;
    std::string err;
    ASSERT_TRUE(k.register_plugin(reg_, &info, &err, root_)) << err;
    EXPECT_EQ(info.endpoint, opts_.dra_endpoint);  // the host path, not the one under the root
    EXPECT_EQ(k.dra_socket(), dra_);
    EXPECT_TRUE(servers_->registered());
    EXPECT_TRUE(k.prepare(dra_, {{"uid-1", "ns", "ok"}}).all_ok({{"uid-1", "ns", "ok"}}));
    // A link that stays inside the root is followed as before.
    servers_.reset();
    EXPECT_FALSE(fs::exists(reg_));
    fs::remove_all(root_ + opts_.registrar_dir);
    fs::create_directories(root_ + "/var/lib/kubelet/registry-real");
    fs::create_directory_symlink("registry-real", root_ + opts_.registrar_dir);
    start();
    ASSERT_TRUE(k.register_plugin(reg_, &info, &err, root_)) << err;
    EXPECT_TRUE(fs::is_socket(root_ + "/var/lib/kubelet/registry-real/" + kDriver + "-reg.sock"));
    expect_outside_untouched();
}

// The registrar or the plugin directory, or a directory above them, linked out of the root
// (an absolute link, or a relative one climbing past the root): start refuses, naming the
// path; the foreign socket there stays, and nothing is created outside.
TEST_F(DraKubeletRootTest, SocketDirectoriesLinkedOutOfTheRootAreRefused) {
    fs::create_directory_symlink(outside_, root_ + opts_.registrar_dir);
    expect_refused(root_ + opts_.registrar_dir);
    fs::remove(root_ + opts_.registrar_dir);

    fs::remove_all(root_ + opts_.plugin_dir);  // made by the start before
    fs::create_directory_symlink("../../../../../outside", root_ + opts_.plugin_dir);
    ASSERT_TRUE(fs::is_socket(root_ + opts_.dra_endpoint));  // the link does lead outside
    expect_refused(root_ + opts_.plugin_dir);
    EXPECT_FALSE(fs::exists(reg_));
    fs::remove(root_ + opts_.plugin_dir);

    // A directory higher up, and directories still to be made behind it.
    fs::remove_all(root_ + "/var/lib/kubelet");
    fs::create_directory_symlink(outside_, root_ + "/var/lib/kubelet");
    expect_refused(root_ + "/var/lib/kubelet");
}

// A link swapped in for the registrar directory while the plugin serves: the next check
// refuses to serve there (nothing outside touched, nothing made there), the DRA socket keeps
// serving, and once the link is gone the registration socket is back beneath the root.
TEST_F(DraKubeletRootTest, ALinkSwappedInBetweenServesIsRefused) {
    start();
    FakeDraKubelet k;
    vfiod::test::DraPluginInfo info;
    std::string err;
    ASSERT_TRUE(k.register_plugin(reg_, &info, &err, root_)) << err;

    const std::string moved = root_ + "/var/lib/kubelet/moved-away";
    fs::rename(root_ + opts_.registrar_dir, moved);
    fs::create_directory_symlink(outside_, root_ + opts_.registrar_dir);
    servers_->check_registration();
    servers_->check_registration();
    expect_outside_untouched();
    EXPECT_FALSE(k.register_plugin(reg_, &info, &err, root_));  // the foreign one: nobody there
    // Our old socket is gone with its server, from where it was bound.
    EXPECT_FALSE(fs::exists(moved + "/" + kDriver + "-reg.sock"));
    EXPECT_TRUE(k.prepare(dra_, {{"uid-1", "ns", "ok"}}).all_ok({{"uid-1", "ns", "ok"}}));

    fs::remove(root_ + opts_.registrar_dir);
    servers_->check_registration();
    ASSERT_TRUE(k.register_plugin(reg_, &info, &err, root_)) << err;
    EXPECT_TRUE(servers_->registered());

    // A link to the foreign socket swapped in for ours: the link goes (gRPC's listener removes
    // whatever socket its path shows when it closes), never what it leads to, and ours is back.
    ASSERT_EQ(unlink(reg_.c_str()), 0);
    fs::create_symlink(foreign_reg_, reg_);
    servers_->check_registration();
    expect_outside_untouched();
    EXPECT_TRUE(fs::is_socket(fs::symlink_status(reg_)));
    ASSERT_TRUE(k.register_plugin(reg_, &info, &err, root_)) << err;
    servers_.reset();
    expect_outside_untouched();
    EXPECT_EQ(tree_of(root_ + opts_.registrar_dir), std::set<std::string>{});
}

// Both directories moved away and links out of the root put in their place while serving:
// shutdown removes our sockets from where they were bound, and nothing the links lead to.
TEST_F(DraKubeletRootTest, ShutdownAfterLinksSwappedInRemovesNothingOutside) {
    start();
    const std::string kubelet = root_ + "/var/lib/kubelet";
    fs::rename(root_ + opts_.registrar_dir, kubelet + "/registry-moved");
    fs::rename(root_ + opts_.plugin_dir, kubelet + "/plugin-moved");
    fs::create_directory_symlink(outside_, root_ + opts_.registrar_dir);
    fs::create_directory_symlink(outside_, root_ + opts_.plugin_dir);
    servers_->shutdown();
    expect_outside_untouched();
    EXPECT_EQ(tree_of(kubelet + "/registry-moved"), std::set<std::string>{});
    EXPECT_EQ(tree_of(kubelet + "/plugin-moved"), std::set<std::string>{});
}

TEST_F(DraKubeletTest, AThousandConcurrentPreparesAllAnsweredWithBoundedThreads) {
    make_servers();
    constexpr unsigned kWorkers = 4;
    servers_->set_limits(kWorkers, 2048);
    prepare_work_ = std::chrono::milliseconds(1);
    start();
    const int base_threads = thread_count();
    constexpr int kClients = 50, kCallsEach = 20;
    std::atomic<int> good{0};
    std::atomic<int> peak_threads{0};
    std::atomic<bool> done{false};
    std::mutex fail_mu;
    std::vector<std::string> failures;
    std::thread monitor([&] {
        while (!done) {
            int n = thread_count();
            int p = peak_threads.load();
            while (n > p && !peak_threads.compare_exchange_weak(p, n)) {
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(2));  // sampling period
        }
    });
    std::vector<std::thread> clients;
    for (int t = 0; t < kClients; ++t)
        clients.emplace_back([&, t] {
            FakeDraKubelet k(std::chrono::seconds(60));
            for (int i = 0; i < kCallsEach; ++i) {
                const std::string uid = "u" + std::to_string(t) + "-" + std::to_string(i);
                auto r = k.prepare(dra_, {{uid, "ns", "ok"}});
                if (r.status.ok() && r.claims.size() == 1 && r.claims[uid].error.empty() &&
                    r.claims[uid].devices == wire_devices_for(uid)) {
                    ++good;
                } else {
                    std::lock_guard l(fail_mu);
                    failures.push_back(uid + ": " + r.status.error_message());
                }
            }
        });
    for (auto& c : clients)
        c.join();
    done = true;
    monitor.join();
    EXPECT_EQ(good.load(), kClients * kCallsEach)
        << (failures.empty() ? "" : failures.front());
    // Prepare never ran on more threads than the workers...
    EXPECT_LE(peak_inside_.load(), static_cast<int>(kWorkers));
    EXPECT_GE(peak_inside_.load(), 1);
    // ...and the process's threads stayed near the clients' own plus a fixed number, far below
    // a thread per call (1,000).
    // The monitor is one more. A server with a thread per call in progress would add up to
    // one per client (50) on top.
    EXPECT_LT(peak_threads.load(), base_threads + kClients + 1 + 30)
        << "base " << base_threads << ", peak " << peak_threads.load();
    RecordProperty("base_threads", base_threads);
    RecordProperty("peak_threads", peak_threads.load());
    std::printf("threads: %d before, %d at the peak with %d client threads\n", base_threads,
                peak_threads.load(), kClients);
}

TEST_F(DraKubeletTest, CallsBeyondTheQueueAreRefusedAndTheRestAnswered) {
    make_servers();
    servers_->set_limits(1, 2);
    hold_ = true;
    start();
    // One call works, two wait, three are refused at once. The first is inside the worker
    // before the others are sent: otherwise two calls may still both be queued when the rest
    // arrive, and four are refused.
    std::mutex m;
    std::vector<grpc::StatusCode> codes;
    std::vector<std::thread> calls;
    auto call = [&](int i) {
        calls.emplace_back([&, i] {
            FakeDraKubelet k(std::chrono::seconds(60));
            auto r = k.prepare(dra_, {{"u" + std::to_string(i), "ns", "ok"}});
            std::lock_guard l(m);
            codes.push_back(r.status.error_code());
        });
    };
    call(0);
    EXPECT_TRUE(wait_for([&] { return inside_.load() == 1; }));
    for (int i = 1; i < 6; ++i)
        call(i);
    auto count = [&](grpc::StatusCode c) {
        std::lock_guard l(m);
        return std::count(codes.begin(), codes.end(), c);
    };
    EXPECT_TRUE(wait_for([&] { return count(grpc::StatusCode::RESOURCE_EXHAUSTED) == 3; }));
    EXPECT_EQ(inside_.load(), 1);
    release();
    for (auto& t : calls)
        t.join();
    EXPECT_EQ(count(grpc::StatusCode::OK), 3);
    EXPECT_EQ(count(grpc::StatusCode::RESOURCE_EXHAUSTED), 3);
    EXPECT_EQ(peak_inside_.load(), 1);
}

// The kubelet calls again when its deadline passes: a call it gave up on stops before its next
// claim, so the single worker is free for the next call long before the 20 claims' 6 s.
TEST_F(DraKubeletTest, ACallPastItsDeadlineStopsAtItsNextClaim) {
    make_servers();
    servers_->set_limits(1, 16);
    prepare_work_ = std::chrono::milliseconds(300);
    start();
    for (bool prepare : {true, false}) {
        SCOPED_TRACE(prepare ? "Prepare" : "Unprepare");
        std::vector<DraClaim> claims;
        for (int i = 0; i < 20; ++i)
            claims.push_back({"uid-" + std::to_string(i), "ns", "ok-" + std::to_string(i)});
        const auto called = std::chrono::steady_clock::now();
        FakeDraKubelet impatient(std::chrono::seconds(1));
        auto r = prepare ? impatient.prepare(dra_, claims) : impatient.unprepare(dra_, claims);
        // Or the plugin's answer just beat the kubelet's timer, saying why the rest were left.
        if (r.status.ok())
            EXPECT_NE(r.claims["uid-19"].error.find("past its deadline"), std::string::npos)
                << r.claims["uid-19"].error;
        else
            EXPECT_EQ(r.status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);

        FakeDraKubelet patient(std::chrono::seconds(5));
        auto next = prepare ? patient.prepare(dra_, {{"uid-next", "ns", "ok-next"}})
                            : patient.unprepare(dra_, {{"uid-next", "ns", "ok-next"}});
        EXPECT_TRUE(next.all_ok({{"uid-next", "ns", "ok-next"}})) << next.status.error_message();
        std::lock_guard l(mu_);
        auto& seen = prepare ? prepared_ : unprepared_;
        // 1 s of 300 ms claims: 4 at most were started (5 on a slow machine), then "uid-next".
        EXPECT_LE(seen.size(), 6u);
        EXPECT_GE(seen.size(), 2u);
        EXPECT_EQ(seen.back().uid, "uid-next");
        if (prepare) {
            // Prepare was told the call's deadline, about 1 s after the call.
            EXPECT_LT(limits_.front(), called + std::chrono::milliseconds(1500));
            EXPECT_GT(limits_.front(), called + std::chrono::milliseconds(500));
        }
        seen.clear();
    }
}

TEST_F(DraKubeletTest, AnOversizedCallIsRefused) {
    start();
    FakeDraKubelet k;
    auto r = k.prepare(dra_, {{"uid-1", "ns", std::string(2 << 20, 'a')}});
    EXPECT_EQ(r.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
        << r.status.error_message();
    EXPECT_TRUE(k.prepare(dra_, {{"uid-2", "ns", "ok"}}).all_ok({{"uid-2", "ns", "ok"}}));
}

TEST_F(DraKubeletTest, ShutdownFinishesCallsAndRemovesTheSockets) {
    make_servers();
    servers_->set_limits(1, 16);
    prepare_work_ = std::chrono::milliseconds(20);
    start();
    ASSERT_TRUE(fs::exists(reg_));
    ASSERT_TRUE(fs::exists(dra_));
    // Calls in flight at shutdown: each ends (answered or refused), none hangs.
    std::vector<std::thread> calls;
    std::atomic<int> ended{0}, ok{0};
    for (int i = 0; i < 6; ++i)
        calls.emplace_back([&, i] {
            FakeDraKubelet k(std::chrono::seconds(30));
            auto r = k.prepare(dra_, {{"u" + std::to_string(i), "ns", "ok"}});
            ok += r.status.ok();
            ++ended;
        });
    while (inside_.load() == 0 && peak_inside_.load() == 0)
        std::this_thread::yield();
    servers_->shutdown();
    for (auto& t : calls)
        t.join();
    EXPECT_EQ(ended.load(), 6);
    EXPECT_GE(ok.load(), 1);
    EXPECT_FALSE(fs::exists(reg_));
    EXPECT_FALSE(fs::exists(dra_));
    FakeDraKubelet k(std::chrono::seconds(2));
    EXPECT_FALSE(k.prepare(dra_, {{"u9", "ns", "ok"}}).status.ok());
    servers_->shutdown();  // twice is harmless
}

// ---- the CLI --------------------------------------------------------------------------------

struct CliRun {
    int exit_code = -1;
    std::string out;
};

CliRun run(const std::string& args) {
    CliRun r;
    std::string cmd = std::string(VFIOD_FAKE_DRA_KUBELET) + " " + args + " 2>/dev/null";
    FILE* p = popen(cmd.c_str(), "r");
    if (!p)
        return r;
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0)
        r.out.append(buf, n);
    int st = pclose(p);
    r.exit_code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    return r;
}

TEST_F(DraKubeletTest, TheCliRegistersPreparesAndUnpreparesInJson) {
    start();
    using nlohmann::json;
    CliRun r = run("register " + reg_);
    ASSERT_EQ(r.exit_code, 0) << r.out;
    json j = json::parse(r.out);
    EXPECT_EQ(j["registered"], true);
    EXPECT_EQ(j["type"], "DRAPlugin");
    EXPECT_EQ(j["name"], kDriver);
    EXPECT_EQ(j["endpoint"], dra_);
    EXPECT_EQ(j["supported_versions"],
              json::array({"v1.DRAPlugin", "v1.DRAResourceHealth", "v1alpha1.DRAResourceHealth"}));
    EXPECT_EQ(j["health_service"], "v1.DRAResourceHealth");
    EXPECT_TRUE(servers_->registered());

    r = run("prepare " + dra_ + " ns/ok-a/uid-1 ns/fail-b/uid-2");
    ASSERT_EQ(r.exit_code, 0) << r.out;
    j = json::parse(r.out);
    EXPECT_EQ(j["code"], 0);
    EXPECT_EQ(j["claims"]["uid-1"]["error"], "");
    ASSERT_EQ(j["claims"]["uid-1"]["devices"].size(), 2u);
    const json& d = j["claims"]["uid-1"]["devices"][0];
    EXPECT_EQ(d["pool_name"], "node-a");
    EXPECT_EQ(d["device_name"], "pci-uid-1");
    EXPECT_EQ(d["request_names"], json::array({"vm"}));
    EXPECT_EQ(d["cdi_device_ids"], json::array({"vfiod.io/vfio=uid-1-dev"}));
    EXPECT_EQ(j["claims"]["uid-2"]["error"], "claim ns/fail-b: refused on purpose");

    r = run("unprepare " + dra_ + " ns/ok-a/uid-1");
    ASSERT_EQ(r.exit_code, 0) << r.out;
    j = json::parse(r.out);
    EXPECT_EQ(j["claims"]["uid-1"]["error"], "");

    // The kubelet's health stream: a line per message, the health as the kubelet has it.
    vfiod::dra::DraDevice failed;
    failed.name = "pci-0000-01-00-0";
    failed.health = {"failed", "aer-fatal: recovery failed"};
    servers_->publish_health({failed});
    r = run("--timeout 1 watch-health " + dra_);
    ASSERT_EQ(r.exit_code, 0) << r.out;
    j = json::parse(r.out.substr(0, r.out.find('\n')));
    EXPECT_EQ(j["messages"], 1);
    EXPECT_EQ(j["devices"]["/pci-0000-01-00-0"]["health"], "UNHEALTHY");  // no --node here
    EXPECT_EQ(j["devices"]["/pci-0000-01-00-0"]["message"], "aer-fatal: recovery failed");
    EXPECT_GT(j["received_ms"].get<int64_t>(), 0);
    EXPECT_EQ(run("--timeout 1 watch-health " + dra_ + " v9.Nothing").exit_code, 1);

    // A gRPC failure: 1, still JSON. Usage: 2.
    r = run("--timeout 2 prepare " + dir_ + "/nothing.sock ns/a/u");
    EXPECT_EQ(r.exit_code, 1);
    j = json::parse(r.out);
    EXPECT_NE(j["code"], 0);
    EXPECT_EQ(run("prepare " + dra_ + " not-a-claim").exit_code, 2);
    EXPECT_EQ(run("frobnicate " + dra_).exit_code, 2);
    EXPECT_EQ(run("").exit_code, 2);
    r = run("--timeout 2 register " + dir_ + "/nothing.sock");
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_EQ(json::parse(r.out)["registered"], false);
}

}  // namespace
