#include "comm/nccl/nccl_communicator.h"

#include <cuda_runtime.h>
#include <gloo/rendezvous/store.h>
#include <nccl.h>

#include <cstring>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "comm/gloo/failure_report.h"
#include "comm/gloo/gloo_communicator.h"
#include "common/gpu_check.h"
#include "common/status.h"
#include "kernels/cuda/check.h"

namespace gantry::comm {

// Every call's result is checked by GPU_RETURN_IF_ERROR (common/gpu_check.h), with these
// texts for this file's two libraries: the CUDA runtime's from kernels/cuda/check.h, NCCL's
// here. Where an error needs a code other than INTERNAL, names the rank and the collective, or
// aborts the group first, the macro's second argument makes that Status from the same words.
using cuda::GpuErrorText;
using cuda::GpuOk;
static bool GpuOk(ncclResult_t r) { return r == ncclSuccess; }
// ncclInProgress is only ever left over when a wait gave up at its deadline (WaitForComm).
static std::string GpuErrorText(ncclResult_t r) {
  return r == ncclInProgress ? absl::StrCat("timed out (ncclInProgress: ", ncclGetErrorString(r), ")")
                             : std::string(ncclGetErrorString(r));
}

namespace {

constexpr char kIdKey[] = "gantry/nccl_unique_id";

ncclComm_t Comm(void* p) { return static_cast<ncclComm_t>(p); }
cudaStream_t Stream(void* p) { return static_cast<cudaStream_t>(p); }


// Polls until the non-blocking communicator leaves ncclInProgress: its state then (ncclSuccess
// or its error), or ncclInProgress at the deadline.
ncclResult_t WaitForComm(ncclComm_t comm, std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    ncclResult_t state = ncclInProgress;
    if (const ncclResult_t r = ncclCommGetAsyncError(comm, &state); !GpuOk(r)) return r;
    if (state != ncclInProgress) return state;
    if (std::chrono::steady_clock::now() > deadline) return ncclInProgress;
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

// A non-blocking call's result, once it is done: r, or the communicator's state when r is
// ncclInProgress (a call still running, waited for until timeout).
ncclResult_t Settled(ncclResult_t r, ncclComm_t comm, std::chrono::milliseconds timeout) {
  return r == ncclInProgress ? WaitForComm(comm, std::chrono::steady_clock::now() + timeout) : r;
}

// Joins the group as a non-blocking communicator (so that joining, and every collective after,
// can be given up on), and waits until it is ready.
ncclResult_t JoinGroup(ncclComm_t* comm, int size, const ncclUniqueId& id, int rank,
                       std::chrono::milliseconds timeout) {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  const ncclResult_t r = ncclCommInitRankConfig(comm, size, id, rank, &config);
  // Ready or not, a communicator made is waited for: its state says.
  return GpuOk(r) || r == ncclInProgress ? WaitForComm(*comm, std::chrono::steady_clock::now() + timeout) : r;
}

// cudaEventQuery as a result and an answer: cudaErrorNotReady is "not yet", not an error.
cudaError_t QueryEvent(cudaEvent_t event, bool* done) {
  const cudaError_t q = cudaEventQuery(event);
  *done = GpuOk(q);
  return q == cudaErrorNotReady ? cudaSuccess : q;
}

// The communicator's asynchronous error, if any (an operation still running is none).
ncclResult_t AsyncError(ncclComm_t comm) {
  ncclResult_t state = ncclSuccess;
  if (const ncclResult_t r = ncclCommGetAsyncError(comm, &state); !GpuOk(r)) return r;
  return state == ncclInProgress ? ncclSuccess : state;
}

}  // namespace

absl::StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::Create(
    int rank, int size, std::shared_ptr<gloo::rendezvous::Store> store, const NcclOptions& options) {
  if (size < 1 || rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank, " of size ", size, " is not a valid group member"));
  }
  std::unique_ptr<NcclCommunicator> c(new NcclCommunicator());
  c->rank_ = rank;
  c->size_ = size;
  c->options_ = options;
  if (c->options_.failure_grace.count() <= 0) {
    c->options_.failure_grace = DefaultFailureGrace(options.timeout);
  }
  c->store_ = std::move(store);
  const std::string where = absl::StrCat("rank ", rank, " of ", size, " on cuda:", options.device);
  GPU_RETURN_IF_ERROR(cudaSetDevice(options.device), GpuErrorAs(absl::StatusCode::kFailedPrecondition, where));
  ncclUniqueId id;
  try {
    if (rank == 0) {
      GPU_RETURN_IF_ERROR(ncclGetUniqueId(&id), GpuErrorAs(absl::StatusCode::kUnavailable, where));
      c->store_->set(kIdKey, std::vector<char>(id.internal, id.internal + sizeof(id.internal)));
    } else {
      c->store_->wait({kIdKey}, options.timeout);
      const std::vector<char> v = c->store_->get(kIdKey);
      if (v.size() != sizeof(id.internal)) {
        return absl::DataLossError(absl::StrCat(where, ": the NCCL unique id in the store has ", v.size(),
                                                " bytes, not ", sizeof(id.internal)));
      }
      std::memcpy(id.internal, v.data(), v.size());
    }
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat(where, ": exchanging the NCCL unique id failed: ", e.what()));
  }
  ncclComm_t comm = nullptr;
  auto join_failed = [&](const absl::Status& s) {
    if (comm) ncclCommAbort(comm);
    return absl::UnavailableError(absl::StrCat(where, ": joining the group failed: ", s.message()));
  };
  GPU_RETURN_IF_ERROR(JoinGroup(&comm, size, id, rank, options.timeout), join_failed);
  c->comm_ = comm;
  cudaStream_t stream;
  cudaEvent_t done;
  GPU_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
                      GpuErrorAs(absl::StatusCode::kInternal, where));
  c->stream_ = stream;
  GPU_RETURN_IF_ERROR(cudaEventCreateWithFlags(&done, cudaEventDisableTiming),
                      GpuErrorAs(absl::StatusCode::kInternal, where));
  c->done_ = done;
  GPU_RETURN_IF_ERROR(cudaMalloc(&c->scratch_, sizeof(float)), GpuErrorAs(absl::StatusCode::kInternal, where));
  return c;
}

NcclCommunicator::~NcclCommunicator() {
  if (comm_) {
    if (broken_.empty()) {
      ncclCommFinalize(Comm(comm_));
      WaitForComm(Comm(comm_), std::chrono::steady_clock::now() + options_.timeout);
      ncclCommDestroy(Comm(comm_));
    } else {
      ncclCommAbort(Comm(comm_));
    }
  }
  if (scratch_) cudaFree(scratch_);
  if (staged_) cudaFree(staged_);
  if (done_) cudaEventDestroy(static_cast<cudaEvent_t>(done_));
  if (stream_) cudaStreamDestroy(Stream(stream_));
}

absl::Status NcclCommunicator::Fail(const char* what, uint64_t seq, const std::string& why) {
  ncclCommAbort(Comm(comm_));
  comm_ = nullptr;
  if (aborted_) {
    broken_ = absl::StrCat(what, " #", seq, " on rank ", rank_, " of ", size_, ": the job's placement was aborted");
    return absl::AbortedError(broken_);
  }
  const std::string missing =
      ReportFailureAndFindMissing(*store_, rank_, size_, seq, options_.failure_grace, &aborted_);
  broken_ = absl::StrCat(what, " #", seq, " failed on rank ", rank_, " of ", size_, ": ", missing, " (timeout ",
                         options_.timeout.count(), " ms; nccl: ", why, ")");
  return absl::DeadlineExceededError(broken_);
}

absl::Status NcclCommunicator::WaitDone(const char* what, uint64_t seq) {
  auto fail = [&](const absl::Status& s) { return Fail(what, seq, std::string(s.message())); };
  GPU_RETURN_IF_ERROR(cudaEventRecord(static_cast<cudaEvent_t>(done_), Stream(stream_)), fail);
  const auto deadline = std::chrono::steady_clock::now() + options_.timeout;
  for (;;) {
    bool done = false;
    GPU_RETURN_IF_ERROR(QueryEvent(static_cast<cudaEvent_t>(done_), &done), fail);
    if (done) return absl::OkStatus();
    GPU_RETURN_IF_ERROR(AsyncError(Comm(comm_)), fail);
    if (aborted_) return Fail(what, seq, "aborted");
    if (std::chrono::steady_clock::now() > deadline) return Fail(what, seq, "timed out");
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

template <typename F>
absl::Status NcclCommunicator::Run(const char* what, F&& launch) {
  const uint64_t seq = ++seq_;
  if (!broken_.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(what, " #", seq, " on rank ", rank_, ": the group failed earlier: ", broken_));
  }
  if (aborted_) return Fail(what, seq, "aborted before it started");
  auto fail = [&](const absl::Status& s) { return Fail(what, seq, std::string(s.message())); };
  // The calling thread (the training thread or a communication thread) on this rank's GPU.
  GPU_RETURN_IF_ERROR(cudaSetDevice(options_.device), fail);
  // Enqueued (a non-blocking communicator may answer ncclInProgress: waited for), then done.
  GPU_RETURN_IF_ERROR(Settled(launch(), Comm(comm_), options_.timeout), fail);
  RETURN_IF_ERROR(WaitDone(what, seq));
  completed_ = seq;
  return absl::OkStatus();
}

bool NcclCommunicator::OnHost(const void* p) {
  if (p == nullptr) return false;
  cudaPointerAttributes a{};
  if (!GpuOk(cudaPointerGetAttributes(&a, p))) {  // a probe: its failure is an answer
    (void)cudaGetLastError();  // older runtimes answer an error for pageable host memory
    return true;
  }
  return a.type == cudaMemoryTypeUnregistered;
}

template <typename T, typename F>
absl::Status NcclCommunicator::RunStaged(const char* what, const T* in, size_t in_n, T* out, size_t out_n,
                                         F&& launch) {
  const bool in_host = OnHost(in), out_host = OnHost(out);
  if (!in_host && !out_host) return Run(what, [&] { return launch(in, out); });
  // Host buffers (a loss, a norm's partial sums, a stage's time): through device scratch on
  // the communicator's stream. Anything large belongs in device memory to begin with.
  const size_t need = (in_host ? in_n : 0) + (out_host ? out_n : 0);
  const size_t need_floats = (need * sizeof(T) + sizeof(float) - 1) / sizeof(float);
  if (need_floats > kMaxStagedFloats) {
    return absl::InvalidArgumentError(absl::StrCat(what, " on rank ", rank_, ": ", need * sizeof(T),
                                                   " bytes of host memory given to NCCL (at most ",
                                                   kMaxStagedFloats * sizeof(float),
                                                   " are staged through the device); pass device memory"));
  }
  GPU_RETURN_IF_ERROR(cudaSetDevice(options_.device));
  if (need_floats > staged_floats_) {
    if (staged_ != nullptr) cudaFree(staged_);
    staged_ = nullptr;
    staged_floats_ = 0;
    void* p = nullptr;
    GPU_RETURN_IF_ERROR(cudaMalloc(&p, need_floats * sizeof(float)));
    staged_ = static_cast<float*>(p);
    staged_floats_ = need_floats;
  }
  T* const staged = reinterpret_cast<T*>(staged_);
  const T* din = in;
  T* dout = out;
  if (in_host) {
    din = staged;
    GPU_RETURN_IF_ERROR(cudaMemcpyAsync(staged, in, in_n * sizeof(T), cudaMemcpyHostToDevice, Stream(stream_)),
                        GpuErrorAs(absl::StatusCode::kInternal,
                                   absl::StrCat(what, " on rank ", rank_, ": copying the input to the device")));
  }
  // In place (out == in, or a reduce-scatter's out == in + rank·n): the same offset into the
  // staged input.
  const bool inside_in = in_host && out >= in && out + out_n <= in + in_n;
  if (out_host) dout = inside_in ? staged + (out - in) : staged + (in_host ? in_n : 0);
  RETURN_IF_ERROR(Run(what, [&] { return launch(din, dout); }));
  if (out_host) {
    GPU_RETURN_IF_ERROR(cudaMemcpy(out, dout, out_n * sizeof(T), cudaMemcpyDeviceToHost),
                        GpuErrorAs(absl::StatusCode::kInternal,
                                   absl::StrCat(what, " on rank ", rank_, ": copying the result to the host")));
  }
  return absl::OkStatus();
}

absl::Status NcclCommunicator::AllReduceSum(float* data, size_t n) {
  return RunStaged("all_reduce", data, n, data, n, [&](const float* in, float* out) {
    return ncclAllReduce(in, out, n, ncclFloat32, ncclSum, Comm(comm_), Stream(stream_));
  });
}

absl::Status NcclCommunicator::ReduceScatterSum(const float* in, float* out, size_t n) {
  return RunStaged("reduce_scatter", in, n * static_cast<size_t>(size_), out, n, [&](const float* i, float* o) {
    return ncclReduceScatter(i, o, n, ncclFloat32, ncclSum, Comm(comm_), Stream(stream_));
  });
}

absl::Status NcclCommunicator::AllGather(const float* in, float* out, size_t n) {
  return RunStaged("all_gather", in, n, out, n * static_cast<size_t>(size_), [&](const float* i, float* o) {
    return ncclAllGather(i, o, n, ncclFloat32, Comm(comm_), Stream(stream_));
  });
}

absl::Status NcclCommunicator::SendRecvChunks(const char* what, const float* in, const std::vector<size_t>& send_counts,
                                              float* out, const std::vector<size_t>& recv_counts) {
  size_t in_n = 0, out_n = 0;
  for (size_t c : send_counts) in_n += c;
  for (size_t c : recv_counts) out_n += c;
  // The launch answers the group's first failed call, for Run's check.
  return RunStaged(what, in, in_n, out, out_n, [&](const float* i, float* o) {
    ncclResult_t r = ncclGroupStart();
    if (!GpuOk(r)) return r;
    size_t sent = 0, received = 0;
    for (int p = 0; p < size_ && GpuOk(r); ++p) {
      const size_t s = send_counts[static_cast<size_t>(p)], v = recv_counts[static_cast<size_t>(p)];
      if (s > 0) r = ncclSend(i + sent, s, ncclFloat32, p, Comm(comm_), Stream(stream_));
      if (GpuOk(r) && v > 0) r = ncclRecv(o + received, v, ncclFloat32, p, Comm(comm_), Stream(stream_));
      sent += s;
      received += v;
    }
    const ncclResult_t end = ncclGroupEnd();  // closes the group whatever happened in it
    return GpuOk(r) ? end : r;
  });
}

absl::Status NcclCommunicator::AllToAll(const float* in, float* out, size_t n) {
  const std::vector<size_t> counts(static_cast<size_t>(size_), n);
  return SendRecvChunks("all_to_all", in, counts, out, counts);
}

absl::Status NcclCommunicator::AllToAllV(const float* in, const std::vector<size_t>& send_counts, float* out,
                                         const std::vector<size_t>& recv_counts) {
  RETURN_IF_ERROR(CheckAllToAllCounts(rank_, size_, send_counts, recv_counts));
  return SendRecvChunks("all_to_all_v", in, send_counts, out, recv_counts);
}

absl::Status NcclCommunicator::AllReduceSumBf16(uint16_t* data, size_t n) {
  return RunStaged("all_reduce", data, n, data, n, [&](const uint16_t* in, uint16_t* out) {
    return ncclAllReduce(in, out, n, ncclBfloat16, ncclSum, Comm(comm_), Stream(stream_));
  });
}

absl::Status NcclCommunicator::ReduceScatterSumBf16(const uint16_t* in, uint16_t* out, size_t n) {
  return RunStaged("reduce_scatter", in, n * static_cast<size_t>(size_), out, n, [&](const uint16_t* i, uint16_t* o) {
    return ncclReduceScatter(i, o, n, ncclBfloat16, ncclSum, Comm(comm_), Stream(stream_));
  });
}

absl::Status NcclCommunicator::Broadcast(float* data, size_t n, int root) {
  if (root < 0 || root >= size_) return absl::InvalidArgumentError(absl::StrCat("broadcast root ", root));
  return RunStaged("broadcast", data, n, data, n, [&](const float* in, float* out) {
    return ncclBroadcast(in, out, n, ncclFloat32, root, Comm(comm_), Stream(stream_));
  });
}

absl::Status NcclCommunicator::Send(const float* data, size_t n, int peer) {
  if (peer < 0 || peer >= size_ || peer == rank_) return absl::InvalidArgumentError(absl::StrCat("send to rank ", peer));
  return RunStaged<float>("send", data, n, nullptr, 0, [&](const float* in, float*) {
    return ncclSend(in, n, ncclFloat32, peer, Comm(comm_), Stream(stream_));
  });
}

absl::Status NcclCommunicator::Recv(float* data, size_t n, int peer) {
  if (peer < 0 || peer >= size_ || peer == rank_) return absl::InvalidArgumentError(absl::StrCat("recv from rank ", peer));
  return RunStaged<float>("recv", nullptr, 0, data, n, [&](const float*, float* out) {
    return ncclRecv(out, n, ncclFloat32, peer, Comm(comm_), Stream(stream_));
  });
}

absl::Status NcclCommunicator::SendRecv(const float* send, size_t send_n, int to, float* recv, size_t recv_n,
                                        int from) {
  RETURN_IF_ERROR(CheckSendRecvPeers(rank_, size_, to, from));
  // The launch answers the group's first failed call, for Run's check.
  return RunStaged("send_recv", send, send_n, recv, recv_n, [&](const float* in, float* out) {
    ncclResult_t r = ncclGroupStart();
    if (!GpuOk(r)) return r;
    if (send_n > 0) r = ncclSend(in, send_n, ncclFloat32, to, Comm(comm_), Stream(stream_));
    if (GpuOk(r) && recv_n > 0) r = ncclRecv(out, recv_n, ncclFloat32, from, Comm(comm_), Stream(stream_));
    const ncclResult_t end = ncclGroupEnd();  // closes the group whatever happened in it
    return GpuOk(r) ? end : r;
  });
}

absl::Status NcclCommunicator::Barrier() {
  return Run("barrier", [&] { return ncclAllReduce(scratch_, scratch_, 1, ncclFloat32, ncclSum, Comm(comm_), Stream(stream_)); });
}

GroupFactory NcclGroups(std::shared_ptr<gloo::rendezvous::Store> store, const NcclOptions& options,
                        std::vector<Communicator*>* made) {
  return StoreGroupsOf<NcclCommunicator>(std::move(store), options, made);
}

}  // namespace gantry::comm
