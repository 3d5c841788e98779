#include "worker/agent/agent.h"

#include <glog/logging.h>
#include <sys/sysinfo.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "common/grpc_util.h"
#include "common/security.h"
#include "kernels/matmul.h"
#include "kernels/threads.h"
#include "worker/agent/dispatch.h"
#include "worker/protocol/messages.h"
#include "worker/train/device.h"

namespace gantry::agent {
namespace {

v1::Resources MyResources(const WorkerOptions& options_) {
  v1::Resources r;
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  r.set_host(options_.host.empty() ? host : options_.host);
  // The kind this worker offers (--device, checked at start); a job of resources.device of
  // that kind may be placed here.
  const auto device = train::ParseDevice(options_.device);
  r.set_device_kind(kernels::BackendKindName(device.ok() ? device->kind : kernels::BackendKind::kCpu));
  r.set_device_count(1);
  if (device.ok() && device->kind != kernels::BackendKind::kCpu) {  // its GPUs (checked at start)
    const train::DeviceInventory inv = train::InventoryOf(*device, options_.gpus);
    r.set_device_count(inv.count);
    r.set_device_name(inv.name);
    r.set_device_memory_bytes(inv.memory_bytes);
  }
  struct sysinfo si;
  if (sysinfo(&si) == 0) r.set_memory_bytes(static_cast<int64_t>(si.totalram) * si.mem_unit);
  return r;
}

// The GPUs' latest sample, for the heartbeat (`gantry workers`: utilisation and memory).
void AddGpus(const gpu_metrics::Sampler& gpus, v1::Heartbeat* hb) {
  for (const gpu_metrics::GpuSample& s : gpus.Latest()) {
    v1::GpuStatus* g = hb->add_gpus();
    g->set_index(s.index);
    if (s.utilization) g->set_utilization(*s.utilization);
    if (s.memory_used_bytes) g->set_memory_used_bytes(*s.memory_used_bytes);
    if (s.memory_total_bytes) g->set_memory_total_bytes(*s.memory_total_bytes);
  }
}

// One attach session: returns when the stream ends; true if the coordinator accepted it.
bool AttachOnce(const WorkerOptions& options_, const std::shared_ptr<v1::Coordinator::Stub>& stub,
                metrics::Registry* registry, const std::atomic<bool>* stop_, const gpu_metrics::Sampler* gpus) {
  grpc::ClientContext ctx;
  auto stream = stub->Attach(&ctx);
  Session session(options_, stream.get(), registry, stub, stop_);
  const v1::WorkerMessage reg = protocol::RegisterMessage(MyResources(options_));
  if (!session.Send(reg)) {
    LOG(WARNING) << "coordinator " << options_.coordinator << " unreachable: " << stream->Finish().error_message();
    return false;
  }
  bool attached = false;
  std::mutex mu;
  std::condition_variable cv;
  bool ended = false;
  std::thread heartbeat([&] {
    std::unique_lock<std::mutex> l(mu);
    while (!ended && !(*stop_)) {
      cv.wait_for(l, std::chrono::milliseconds(options_.heartbeat_ms));
      if (ended || (*stop_)) break;
      v1::WorkerMessage hb = protocol::HeartbeatMessage(NowUnixMs());
      session.FillHeartbeat(hb.mutable_heartbeat());
      if (gpus != nullptr) AddGpus(*gpus, hb.mutable_heartbeat());
      l.unlock();
      session.Send(hb);
      l.lock();
    }
    if ((*stop_)) ctx.TryCancel();  // unblock the reader
  });
  // The running job's ranks here, a thread each (one per GPU the coordinator gave it).
  std::vector<std::thread> ranks;
  auto join_ranks = [&ranks] {
    for (auto& t : ranks) t.join();
    ranks.clear();
  };
  MessageDispatch dispatch;
  v1::CoordinatorMessage in;
  while (stream->Read(&in)) {
    switch (dispatch.On(in)) {
      case MessageDispatch::Action::kAttached:
        attached = true;
        LOG(INFO) << "attached to " << options_.coordinator << " as " << in.worker_id();
        break;
      case MessageDispatch::Action::kNewPlacement:
        join_ranks();
        session.cancel = false;
        [[fallthrough]];
      case MessageDispatch::Action::kRunRank:
        ranks.emplace_back([&session, a = in.assign()] { session.Run(a); });
        break;
      case MessageDispatch::Action::kAbort:
        // Every rank stops, including one already waiting in the next step's collective for a
        // rank that stopped at the step boundary.
        LOG(INFO) << "job " << dispatch.job_id() << ": " << (in.has_cancel_job_id() ? "cancel" : "restart")
                  << " received";
        session.Abort();
        break;
      case MessageDispatch::Action::kPreempt:
        LOG(INFO) << "job " << dispatch.job_id() << ": preempted: checkpoint after step " << in.preempt().stop_step()
                  << " and stop";
        session.Preempt(in.preempt().job_id(), in.preempt().generation(), in.preempt().stop_step());
        break;
      case MessageDispatch::Action::kMarkFailed:
        LOG(INFO) << "job " << dispatch.job_id() << ": abort received";
        session.cancel = true;
        break;
      case MessageDispatch::Action::kNone:
        break;
    }
  }
  session.Abort();  // the coordinator is gone: this generation of the job is over
  join_ranks();
  {
    std::lock_guard<std::mutex> l(mu);
    ended = true;
  }
  cv.notify_all();
  heartbeat.join();
  auto st = stream->Finish();
  if (!(*stop_)) LOG(WARNING) << "attach stream ended: " << st.error_message();
  return attached;
}

}  // namespace

void RunAgent(const WorkerOptions& options_, metrics::Registry* registry, const std::atomic<bool>* stop_,
              const gpu_metrics::Sampler* gpus) {
  int backoff_ms = 200;
  while (!(*stop_)) {
    const auto t0 = std::chrono::steady_clock::now();
    // A channel per attempt: a channel whose connection failed keeps answering "connection
    // refused" for as long as gRPC's reconnect back-off has grown (16 s seen after a
    // coordinator restart of a second), while a new one connects at once.
    const bool attached =
        AttachOnce(options_, v1::Coordinator::NewStub(MakeChannel(options_.coordinator)), registry, stop_, gpus);
    if ((*stop_)) break;
    // The back-off is for a coordinator that is away: one that accepted the worker (and then
    // went, e.g. restarted) is tried again from the shortest wait.
    if (attached || std::chrono::steady_clock::now() - t0 > std::chrono::seconds(10)) backoff_ms = 200;
    // Wait before re-attaching (bounded exponential backoff), checking for SIGTERM.
    for (int waited = 0; waited < backoff_ms && !(*stop_); waited += 50) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    backoff_ms = std::min(backoff_ms * 2, 5000);
  }
}

double MeasureCpuPeak(int threads) {
  double best = 0;
  std::thread t([&] {
    kernels::ConfigureThreads(threads);
    const int n = 1024;
    std::vector<float> a(static_cast<size_t>(n) * n, 0.5f), b(a.size(), 0.25f), c(a.size());
    for (int i = 0; i < 4; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      kernels::matmul_forward(c.data(), a.data(), b.data(), nullptr, n, n, n);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (i > 0) best = std::max(best, 2.0 * n * n * n / s);
    }
  });
  t.join();
  return best;
}


}  // namespace gantry::agent
