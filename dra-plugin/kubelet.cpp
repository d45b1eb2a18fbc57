#include "kubelet.hpp"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>

#include "core/strings.hpp"
#include "infra/fd.hpp"
#include "io/host_fs.hpp"
#include "dra.grpc.pb.h"
#include "pluginregistration.grpc.pb.h"

namespace vfiod::dra {

namespace drapb = k8s::io::kubelet::pkg::apis::dra::v1;
namespace regpb = pluginregistration;

namespace {

// What bind() takes: sun_path less its terminating NUL.
constexpr size_t kMaxSocketPath = sizeof(sockaddr_un{}.sun_path) - 1;
// A kubelet's call names one pod's claims: a few hundred bytes. Anything near this is hostile.
constexpr int kMaxMessageBytes = 1 << 20;
// Kubernetes UIDs are 36 characters; namespaces and names at most 253.
constexpr size_t kMaxUid = 128;
constexpr size_t kMaxName = 253;

std::string describe(const std::string& ns, const std::string& name, const std::string& uid) {
    return printable(ns) + "/" + printable(name) + " (" + printable(uid) + ")";
}

// Prepare writes files named after the UID: only what a Kubernetes UID can hold gets through.
std::string check_claim(const drapb::Claim& c) {
    const std::string who = "claim " + describe(c.namespace_(), c.name(), c.uid());
    if (c.uid().size() > kMaxUid)
        return who + ": the UID is longer than " + std::to_string(kMaxUid) + " bytes";
    for (char ch : c.uid())
        if (!(ascii_alnum(ch) || ch == '-'))
            return who + ": the UID holds a character other than letters, digits and '-'";
    if (c.namespace_().empty() || c.name().empty())
        return who + ": the namespace or the name is empty";
    for (const std::string* s : {&c.namespace_(), &c.name()}) {
        if (s->size() > kMaxName)
            return who + ": a namespace or name longer than " + std::to_string(kMaxName) + " bytes";
        for (char ch : *s)
            if (!(ascii_alnum(ch) || ch == '-' || ch == '.'))
                return who + ": the namespace or the name is not a DNS name";
    }
    return "";
}

// The calls' own threads: a fixed number of workers and a bounded queue, so that however many
// calls the kubelet (or anyone who can reach the socket) makes at once, the threads and the
// memory stay bounded. gRPC's callback API hands us each call without a thread of its own.
class WorkQueue {
public:
    struct Job {
        std::function<void()> run;     // does the work and finishes the call
        std::function<void()> refuse;  // finishes the call unworked (stopping)
    };

    // Set before start(); the defaults suit a kubelet.
    struct Limits {
        unsigned workers = 8;
        size_t max_waiting = 2048;
    } limits;

    void start() {
        std::lock_guard l(mu_);
        stopping_ = false;
        max_waiting_ = limits.max_waiting;
        for (unsigned i = 0; i < limits.workers; ++i)
            threads_.emplace_back([this] { loop(); });
    }
    enum class Submitted { Queued, Full, Stopping };
    // Unless Queued, the caller refuses the call itself.
    Submitted submit(Job j) {
        std::lock_guard l(mu_);
        if (stopping_ || threads_.empty())
            return Submitted::Stopping;
        if (jobs_.size() >= max_waiting_)
            return Submitted::Full;
        jobs_.push_back(std::move(j));
        cv_.notify_one();
        return Submitted::Queued;
    }
    // Refuses what waits, lets what runs finish, joins the workers.
    void stop() {
        std::deque<Job> waiting;
        std::vector<std::thread> threads;
        {
            std::lock_guard l(mu_);
            stopping_ = true;
            waiting.swap(jobs_);
            threads.swap(threads_);
            cv_.notify_all();
        }
        for (auto& j : waiting)
            j.refuse();
        for (auto& t : threads)
            t.join();
    }

private:
    void loop() {
        for (;;) {
            Job j;
            {
                std::unique_lock l(mu_);
                cv_.wait(l, [&] { return stopping_ || !jobs_.empty(); });
                if (jobs_.empty())
                    return;
                j = std::move(jobs_.front());
                jobs_.pop_front();
            }
            j.run();
        }
    }

    std::mutex mu_;
    std::condition_variable cv_;
    std::deque<Job> jobs_;
    std::vector<std::thread> threads_;
    size_t max_waiting_ = 0;
    bool stopping_ = true;
};

}  // namespace

// ---- the services ----------------------------------------------------------------------------

// What the kubelet said of our registration, set by its NotifyRegistrationStatus.
struct RegistrationStatus {
    mutable std::mutex mu;
    std::string error;
    bool registered = false;
};

class RegistrationService final : public regpb::Registration::CallbackService {
public:
    RegistrationService(const KubeletServers::Options& o, RegistrationStatus& status)
        : o_(o), status_(status) {}

    grpc::ServerUnaryReactor* GetInfo(grpc::CallbackServerContext* ctx, const regpb::InfoRequest*,
                                      regpb::PluginInfo* out) override {
        out->set_type("DRAPlugin");
        out->set_name(o_.driver);
        out->set_endpoint(o_.dra_endpoint);
        out->add_supported_versions("v1.DRAPlugin");
        // The kubelet opens a health stream when it finds one of these (v1 first).
        for (const auto& name : HealthStreams::service_names())
            out->add_supported_versions(name);
        spdlog::debug("{}: GetInfo from {}", o_.driver, printable(ctx->peer()));
        auto* r = ctx->DefaultReactor();
        r->Finish(grpc::Status::OK);
        return r;
    }

    grpc::ServerUnaryReactor* NotifyRegistrationStatus(grpc::CallbackServerContext* ctx,
                                                       const regpb::RegistrationStatus* s,
                                                       regpb::RegistrationStatusResponse*) override {
        {
            std::lock_guard l(status_.mu);
            status_.registered = s->plugin_registered();
            status_.error = s->plugin_registered() ? "" : (s->error().empty() ? "(no reason given)"
                                                                               : s->error());
        }
        if (s->plugin_registered())
            spdlog::info("{}: the kubelet registered the DRA plugin (endpoint {})", o_.driver,
                         o_.dra_endpoint);
        else
            spdlog::error("{}: the kubelet refused the DRA plugin's registration: {}", o_.driver,
                          printable(s->error(), 500));
        auto* r = ctx->DefaultReactor();
        r->Finish(grpc::Status::OK);
        return r;
    }

private:
    const KubeletServers::Options& o_;
    RegistrationStatus& status_;
};

class DraService final : public drapb::DRAPlugin::CallbackService {
public:
    DraService(const std::string& driver, const KubeletServers::Prepare& prepare,
               const KubeletServers::Unprepare& unprepare, WorkQueue& queue)
        : driver_(driver), prepare_(prepare), unprepare_(unprepare), queue_(queue) {}

    grpc::ServerUnaryReactor* NodePrepareResources(grpc::CallbackServerContext* ctx,
                                                   const drapb::NodePrepareResourcesRequest* req,
                                                   drapb::NodePrepareResourcesResponse* out)
        override {
        return dispatch(ctx, "NodePrepareResources", req->claims(),
                        [this, req, out](const CallLimit& l) { prepare_all(*req, out, l); });
    }

    grpc::ServerUnaryReactor* NodeUnprepareResources(
        grpc::CallbackServerContext* ctx, const drapb::NodeUnprepareResourcesRequest* req,
        drapb::NodeUnprepareResourcesResponse* out) override {
        return dispatch(ctx, "NodeUnprepareResources", req->claims(),
                        [this, req, out](const CallLimit& l) { unprepare_all(*req, out, l); });
    }

private:
    using Claims = google::protobuf::RepeatedPtrField<drapb::Claim>;

    // The checks that refuse a whole call, then the work on a worker of ours. The request and
    // the response live until the reactor's Finish, which comes last on every path.
    grpc::ServerUnaryReactor* dispatch(grpc::CallbackServerContext* ctx, const char* method,
                                       const Claims& claims,
                                       std::function<void(const CallLimit&)> work) {
        auto* r = ctx->DefaultReactor();
        grpc::Status refusal = check_call(method, claims);
        if (!refusal.ok()) {
            spdlog::warn("{}: {} refused: {}", driver_, method, refusal.error_message());
            r->Finish(refusal);
            return r;
        }
        const std::string m = method;
        WorkQueue::Job job;
        job.run = [r, ctx, m, work = std::move(work), driver = driver_] {
            grpc::Status s = grpc::Status::OK;
            if (ctx->IsCancelled()) {
                // The kubelet gave up waiting; it calls again for what it still needs.
                s = grpc::Status(grpc::StatusCode::CANCELLED, m + ": the caller went away");
            } else {
                try {
                    work(limit_of(ctx));
                } catch (const std::exception& e) {
                    s = grpc::Status(grpc::StatusCode::INTERNAL, m + ": " + e.what());
                    spdlog::error("{}: {} failed: {}", driver, m, printable(e.what(), 500));
                } catch (...) {
                    s = grpc::Status(grpc::StatusCode::INTERNAL, m + ": unknown exception");
                    spdlog::error("{}: {} failed: unknown exception", driver, m);
                }
            }
            r->Finish(s);
        };
        job.refuse = [r, m] {
            r->Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, m + ": the plugin is stopping"));
        };
        switch (queue_.submit(std::move(job))) {
        case WorkQueue::Submitted::Queued:
            break;
        case WorkQueue::Submitted::Full: {
            const std::string why = m + ": too many calls waiting; try again";
            spdlog::warn("{}: {}", driver_, why);
            r->Finish(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, why));
            break;
        }
        case WorkQueue::Submitted::Stopping:
            r->Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, m + ": the plugin is stopping"));
            break;
        }
        return r;
    }

    // The call's deadline on our clock, and its cancellation as gRPC sees it.
    static CallLimit limit_of(grpc::CallbackServerContext* ctx) {
        CallLimit l;
        l.cancelled = [ctx] { return ctx->IsCancelled(); };
        // None (max), or one too far off to matter, is no deadline; steady_clock's
        // nanoseconds would overflow before such a one anyway.
        const auto left = ctx->deadline() - std::chrono::system_clock::now();
        if (left < std::chrono::hours(24))
            l.deadline = std::chrono::steady_clock::now() +
                         std::chrono::duration_cast<std::chrono::steady_clock::duration>(left);
        return l;
    }

    // Once the kubelet has given up on a call, its claims left are answered unworked, with why,
    // and logged in one line rather than one each.
    struct Leftovers {
        Leftovers(const CallLimit& l, const char* v) : limit(l), verb(v) {}
        const CallLimit& limit;
        const char* verb;  // "prepared"
        std::string over;
        size_t count = 0;
        // "" while the call goes on; otherwise the claim's error.
        std::string check(const ClaimRef& c) {
            if (over.empty())
                over = limit.over();
            if (over.empty())
                return "";
            ++count;
            return "claim " + describe(c.namespace_, c.name, c.uid) + ": not " + verb + ": " + over;
        }
        void log(const std::string& driver, const char* method) const {
            if (count)
                spdlog::warn("{}: {}: {} claim(s) not worked on: {}", driver, method, count, over);
        }
    };

    grpc::Status check_call(const char* method, const Claims& claims) const {
        if (claims.size() > KubeletServers::kMaxClaimsPerCall)
            return {grpc::StatusCode::INVALID_ARGUMENT,
                    std::string(method) + " with " + std::to_string(claims.size()) +
                        " claims: at most " +
                        std::to_string(KubeletServers::kMaxClaimsPerCall) + " a call"};
        // The answer is keyed by UID: a claim without one could not be answered at all.
        for (const auto& c : claims)
            if (c.uid().empty())
                return {grpc::StatusCode::INVALID_ARGUMENT,
                        std::string(method) + ": claim " +
                            describe(c.namespace_(), c.name(), c.uid()) + " has no UID"};
        return grpc::Status::OK;
    }

    // Each claim on its own: one claim's failure (or exception) is that claim's error only.
    void prepare_all(const drapb::NodePrepareResourcesRequest& req,
                     drapb::NodePrepareResourcesResponse* out, const CallLimit& limit) {
        auto& answers = *out->mutable_claims();
        Leftovers left{limit, "prepared"};
        for (const auto& c : req.claims()) {
            if (answers.count(c.uid()))
                continue;  // named twice in one call: prepared once
            drapb::NodePrepareResourceResponse& a = answers[c.uid()];
            ClaimRef ref{c.uid(), c.namespace_(), c.name()};
            if (std::string e = left.check(ref); !e.empty()) {
                a.set_error(e);
                continue;
            }
            PrepareResult res;
            res.error = check_claim(c);
            if (res.error.empty()) {
                try {
                    res = prepare_(ref, limit);
                } catch (const std::exception& e) {
                    res = {};
                    res.error = "preparing claim " + describe(ref.namespace_, ref.name, ref.uid) +
                                ": internal error: " + e.what();
                } catch (...) {
                    res = {};
                    res.error = "preparing claim " + describe(ref.namespace_, ref.name, ref.uid) +
                                ": internal error";
                }
            }
            if (!res.error.empty()) {
                a.set_error(res.error);
                spdlog::warn("{}: NodePrepareResources: {}", driver_, printable(res.error, 1000));
                continue;
            }
            for (const PreparedDevice& d : res.devices) {
                drapb::Device* dev = a.add_devices();
                for (const auto& rq : d.requests)
                    dev->add_request_names(rq);
                dev->set_pool_name(d.pool);
                dev->set_device_name(d.device);
                for (const auto& id : d.cdi_ids)
                    dev->add_cdi_device_ids(id);
            }
            spdlog::info("{}: prepared claim {}: {} device(s)", driver_,
                         describe(ref.namespace_, ref.name, ref.uid), res.devices.size());
        }
        left.log(driver_, "NodePrepareResources");
    }

    void unprepare_all(const drapb::NodeUnprepareResourcesRequest& req,
                       drapb::NodeUnprepareResourcesResponse* out, const CallLimit& limit) {
        auto& answers = *out->mutable_claims();
        Leftovers left{limit, "unprepared"};
        for (const auto& c : req.claims()) {
            if (answers.count(c.uid()))
                continue;
            drapb::NodeUnprepareResourceResponse& a = answers[c.uid()];
            ClaimRef ref{c.uid(), c.namespace_(), c.name()};
            if (std::string e = left.check(ref); !e.empty()) {
                a.set_error(e);
                continue;
            }
            std::string err = check_claim(c);
            if (err.empty()) {
                try {
                    err = unprepare_(ref, limit);
                } catch (const std::exception& e) {
                    err = "unpreparing claim " + describe(ref.namespace_, ref.name, ref.uid) +
                          ": internal error: " + e.what();
                } catch (...) {
                    err = "unpreparing claim " + describe(ref.namespace_, ref.name, ref.uid) +
                          ": internal error";
                }
            }
            if (!err.empty()) {
                a.set_error(err);
                spdlog::warn("{}: NodeUnprepareResources: {}", driver_, printable(err, 1000));
            } else {
                spdlog::info("{}: unprepared claim {}", driver_,
                             describe(ref.namespace_, ref.name, ref.uid));
            }
        }
        left.log(driver_, "NodeUnprepareResources");
    }

    const std::string& driver_;
    const KubeletServers::Prepare& prepare_;
    const KubeletServers::Unprepare& unprepare_;
    WorkQueue& queue_;
};

// ---- sockets ----------------------------------------------------------------------------------

namespace {

// One socket we serve: the file `name` in the directory `dir`, a host path looked up beneath
// the root.
struct Served {
    std::string dir, name;
    std::string path;  // where a client finds it, under the root: messages and bind()'s limit
    // The directory as opened beneath the root when the socket was bound, held while it is
    // served. gRPC binds the socket, and removes its file when it stops listening, through
    // /proc/self/fd/N/<name>: that reaches this directory whatever links change on the way
    // meanwhile, and is short whatever the root's length. Declared before the server, so the
    // server is gone before the fd closes and N names something else.
    Fd dirfd;
    std::unique_ptr<grpc::Server> server;
    // The file we bound. The inode alone is not enough: a file made after ours was removed
    // often gets the same inode number back, so its change time is compared too.
    dev_t dev = 0;
    ino_t ino = 0;
    timespec ctime{};
};

// The socket's directory beneath the root (made when missing and `create`); invalid and *err
// naming it otherwise.
Fd open_dir(const HostFs& host, const Served& s, bool create, std::string* err) {
    int e = 0;
    Fd dir = host.open_own_dir(HostFs::rel_of(s.dir), create, &e);
    if (dir.get() < 0)
        *err = "cannot listen on " + s.path + ": its directory " +
               host.path(HostFs::rel_of(s.dir)) + ": " + host.own_dir_error(e);
    return dir;
}

// Whether s.name in dirfd is the socket we bound; never follows a link there.
bool is_ours(const Served& s, int dirfd) {
    struct stat st;
    return dirfd >= 0 && fstatat(dirfd, s.name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 &&
           st.st_dev == s.dev && st.st_ino == s.ino && st.st_ctim.tv_sec == s.ctime.tv_sec &&
           st.st_ctim.tv_nsec == s.ctime.tv_nsec;
}

// A socket file left by a killed instance would make bind() fail: removed. Anything else there
// (a link included) is not ours to remove.
bool clear_path(const Served& s, int dirfd, std::string* err) {
    struct stat st;
    if (fstatat(dirfd, s.name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
        if (errno == ENOENT)
            return true;
        *err = "cannot examine " + s.path + ": " + std::strerror(errno);
        return false;
    }
    if (!S_ISSOCK(st.st_mode)) {
        *err = "cannot listen on " + s.path + ": it exists and is not a socket";
        return false;
    }
    if (unlinkat(dirfd, s.name.c_str(), 0) != 0 && errno != ENOENT) {
        *err = "cannot remove the stale socket " + s.path + ": " + std::strerror(errno);
        return false;
    }
    return true;
}

void stop(Served* s, std::chrono::system_clock::time_point deadline) {
    if (!s->server)
        return;
    const bool ours = is_ours(*s, s->dirfd.get());
    s->server->Shutdown(deadline);
    s->server->Wait();
    s->server.reset();
    // Someone else's file at the path (a new instance) stays.
    if (ours && is_ours(*s, s->dirfd.get()))
        unlinkat(s->dirfd.get(), s->name.c_str(), 0);
    s->dirfd.reset();
}

bool serve(Served* s, const HostFs& host, const std::vector<grpc::Service*>& services,
           std::string* err) {
    if (s->path.size() > kMaxSocketPath) {
        *err = "cannot listen on " + s->path + ": " + std::to_string(s->path.size()) +
               " bytes, and a unix socket path holds at most " + std::to_string(kMaxSocketPath);
        return false;
    }
    s->dirfd = open_dir(host, *s, true, err);
    if (s->dirfd.get() < 0 || !clear_path(*s, s->dirfd.get(), err)) {
        s->dirfd.reset();
        return false;
    }
    grpc::ServerBuilder b;
    b.AddListeningPort("unix:///proc/self/fd/" + std::to_string(s->dirfd.get()) + "/" + s->name,
                       grpc::InsecureServerCredentials());
    b.SetMaxReceiveMessageSize(kMaxMessageBytes);
    for (grpc::Service* service : services)
        b.RegisterService(service);
    s->server = b.BuildAndStart();
    struct stat st;
    if (!s->server) {
        *err = "cannot listen on " + s->path;
    } else if (fstatat(s->dirfd.get(), s->name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
        *err = "listening on " + s->path + " but its file is gone: " + std::strerror(errno);
    } else {
        s->dev = st.st_dev;
        s->ino = st.st_ino;
        s->ctime = st.st_ctim;
        return true;
    }
    stop(s, std::chrono::system_clock::now());
    s->dirfd.reset();
    return false;
}

}  // namespace

// A socket we serve, and the service it serves while it is up.
template <class Service>
struct Endpoint : Served {
    std::unique_ptr<Service> service;
};

struct KubeletServers::Impl {
    Impl(Options opts, Prepare p, Unprepare u)
        : o(std::move(opts)), host(o.root), calls{std::move(p), std::move(u)}, health(o.health) {
        auto place = [this](Served* s, const std::string& dir, const std::string& name) {
            s->dir = dir;
            s->name = name;
            s->path = host.path(HostFs::rel_of(dir)) + "/" + name;
        };
        place(&reg, o.registrar_dir, o.driver + "-reg.sock");
        place(&dra, o.plugin_dir, "dra.sock");
    }

    Options o;
    KernelHostFs host;
    struct {
        Prepare prepare;
        Unprepare unprepare;
    } calls;  // what the DRA service hands each claim to

    std::mutex mu;  // the servers; start, check_registration and shutdown
    WorkQueue queue;
    // Before the DRA socket's server: its streams refer to it until that server is gone.
    HealthStreams health;
    Endpoint<DraService> dra;
    Endpoint<RegistrationService> reg;

    RegistrationStatus status;  // what the kubelet said

    std::string last_reserve_error;  // logged once, not at every check that fails alike

    // The directory is made again if it went with the kubelet's state: the watcher looks for
    // it again.
    bool serve_registration(std::string* err) {
        // A service belongs to one server for life: each new socket gets a new one.
        reg.service = std::make_unique<RegistrationService>(o, status);
        {
            std::lock_guard l(status.mu);
            status.error.clear();
            status.registered = false;
        }
        return serve(&reg, host, {reg.service.get()}, err);
    }

    void stop_all_locked() {
        const auto deadline = std::chrono::system_clock::now() + std::chrono::seconds(2);
        stop(&reg, deadline);
        // Calls waiting for a worker are refused, running ones finish: only then can the
        // server's shutdown complete, as it waits for every call to be finished.
        queue.stop();
        health.stop();
        stop(&dra, deadline);
        reg.service.reset();
        dra.service.reset();
    }
};

KubeletServers::KubeletServers(Options o, Prepare prepare, Unprepare unprepare)
    : impl_(std::make_unique<Impl>(std::move(o), std::move(prepare), std::move(unprepare))) {}

KubeletServers::~KubeletServers() { shutdown(); }

void KubeletServers::set_limits(unsigned workers, size_t max_waiting_calls) {
    std::lock_guard l(impl_->mu);
    impl_->queue.limits = {workers == 0 ? 1 : workers, max_waiting_calls};
}

bool KubeletServers::start(std::string* err) {
    std::lock_guard l(impl_->mu);
    Impl& m = *impl_;
    if (m.reg.server || m.dra.server)
        m.stop_all_locked();
    m.queue.start();
    m.dra.service =
        std::make_unique<DraService>(m.o.driver, m.calls.prepare, m.calls.unprepare, m.queue);
    m.health.start();
    std::vector<grpc::Service*> services = m.health.make_services();
    services.insert(services.begin(), m.dra.service.get());
    // The DRA socket first: the kubelet dials it as soon as registration answers.
    if (!serve(&m.dra, m.host, services, err) || !m.serve_registration(err)) {
        m.stop_all_locked();
        return false;
    }
    spdlog::info("{}: serving registration on {} and the DRA service on {}", m.o.driver,
                 m.reg.path, m.dra.path);
    return true;
}

void KubeletServers::check_registration() {
    std::lock_guard l(impl_->mu);
    Impl& m = *impl_;
    if (!m.dra.server)
        return;
    // Looked up again from the root: a directory moved away, or a link put in its place, leaves
    // our socket where the kubelet no longer looks.
    std::string ignored;
    if (m.reg.server && is_ours(m.reg, open_dir(m.host, m.reg, false, &ignored).get()))
        return;
    if (m.last_reserve_error.empty())
        spdlog::warn("{}: the registration socket {} was removed or replaced; serving it again",
                 m.o.driver, m.reg.path);
    // The old server first: gRPC removes a unix socket's file when its listener closes, which
    // would take the new one with it.
    stop(&m.reg, std::chrono::system_clock::now());
    std::string err;
    if (!m.serve_registration(&err)) {
        if (err != std::exchange(m.last_reserve_error, err))
            spdlog::error("{}: {}; trying again at the next check", m.o.driver, err);
        return;
    }
    m.last_reserve_error.clear();
}

std::string KubeletServers::registration_error() const {
    std::lock_guard l(impl_->status.mu);
    return impl_->status.error;
}

bool KubeletServers::registered() const {
    std::lock_guard l(impl_->status.mu);
    return impl_->status.registered;
}

void KubeletServers::publish_health(const std::vector<DraDevice>& devices) {
    impl_->health.publish(devices);
}

HealthStreams::Stats KubeletServers::health_stats() const { return impl_->health.stats(); }

void KubeletServers::shutdown() {
    if (!impl_)
        return;
    std::lock_guard l(impl_->mu);
    if (impl_->reg.server || impl_->dra.server)
        spdlog::info("{}: stopping the kubelet-facing servers", impl_->o.driver);
    impl_->stop_all_locked();
}

}  // namespace vfiod::dra
