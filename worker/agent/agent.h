// The worker's agent: attaches to the coordinator (register, heartbeat, the attach stream),
// runs each assignment in a Session (what each message means: dispatch.h), and re-attaches with
// a bounded back-off until stopped.
#pragma once

#include <atomic>

#include "common/metrics.h"
#include "worker/gpu_metrics/sampler.h"
#include "worker/agent/session.h"

namespace gantry::agent {

// Attaches and re-attaches until *stop. gpus: the worker's GPU metrics, whose latest sample each
// heartbeat carries (null: none).
void RunAgent(const WorkerOptions& options, metrics::Registry* registry, const std::atomic<bool>* stop,
              const gpu_metrics::Sampler* gpus = nullptr);

// The CPU's attainable fp32 FLOP/s: the best of a few 1024^3 GEMMs on `threads` training
// threads. MFU on a CPU worker is measured against this (a GPU worker takes its datasheet peak).
double MeasureCpuPeak(int threads);

}  // namespace gantry::agent
