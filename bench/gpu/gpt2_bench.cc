// GPT-2 124M (12 layers, 768, 12 heads, T 1024, vocab 50257 padded to 50304) training steps
// on one GPU through gantry's model and ZeroEngine on the cuda backend: the largest micro-batch that fits, tokens/s, MFU
// (llm.c's definition, (6N + 6 L C T) x tokens/s / peak, 989 TFLOP/s for the H100/H200
// bf16 dense peak; N every parameter), the arena and the device's peak memory, and the time per op per step.
// --arch llama: a Llama of the same depth and width (12 layers, 768, 12 query heads over 4
// key/value heads, SwiGLU FFN 2048, vocab 32000, untied embeddings, RMSNorm eps 1e-5, RoPE theta
// 10000, T 1024), as bench/torch_gpt2.py gpu-bench --arch llama builds it in transformers.
// bench/gpu/run.sh runs it next to the PyTorch peer (bench/torch_gpt2.py gpu-bench) and
// prints the ratio. The last line is JSON for the driver.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/rng.h"
#include "kernels/backend.h"
#include "model/gpt.h"
#include "comm/comm_thread.h"
#include "worker/train/device.h"
#include "worker/train/zero.h"

namespace gantry {
namespace {

// The model and its optimizer on one device, as the Trainer runs one rank: model::GPT on the
// backend, ZeroEngine (ZeRO 0, one rank) for the norm, the clip and AdamW.
struct OnDevice {
  std::unique_ptr<kernels::Backend> backend;
  std::unique_ptr<model::GPT> model;
  comm::SoloCommunicator solo;
  std::unique_ptr<train::ZeroEngine> engine;
};

int Main(int argc, char** argv) {
  int steps = 10, warmup = 3, only_batch = 0, T = 1024, layers = 12;
  int classifier_rows = 0;  // --classifier-rows N: the classifier and its loss N rows at a time (0: all)
  bool fused_grad_casts = false;  // --fused-grad-casts on: the backward's 16-bit casts in the ops (GPT::set_fused_grad_casts)
  double peak_flops = 989e12;
  std::string device = "cuda:0";
  kernels::BackendOptions options;  // --attention auto (default), cudnn, fused or reference
  // --precision: bf16 (default; the peer runs under bf16 autocast) or fp32.
  kernels::Precision precision = kernels::Precision::kBf16;
  jobspec::Arch arch = jobspec::Arch::kGpt2;  // --arch gpt2 (default) or llama
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    bool ok = true;
    if (a == "--steps") ok = absl::SimpleAtoi(argv[i + 1], &steps);
    else if (a == "--warmup") ok = absl::SimpleAtoi(argv[i + 1], &warmup);
    else if (a == "--batch") ok = absl::SimpleAtoi(argv[i + 1], &only_batch);
    else if (a == "--seq-len") ok = absl::SimpleAtoi(argv[i + 1], &T) && T >= 1 && T <= 1024;
    else if (a == "--layers") ok = absl::SimpleAtoi(argv[i + 1], &layers) && layers >= 1;
    else if (a == "--classifier-rows") ok = absl::SimpleAtoi(argv[i + 1], &classifier_rows) && classifier_rows >= 0;
    else if (a == "--fused-grad-casts") {
      const std::string v = argv[i + 1];
      ok = v == "on" || v == "off";
      fused_grad_casts = v == "on";
    }
    else if (a == "--device") device = argv[i + 1];
    else if (a == "--arch") {
      const std::string v = argv[i + 1];
      ok = v == "gpt2" || v == "llama";
      arch = v == "llama" ? jobspec::Arch::kLlama : jobspec::Arch::kGpt2;
    }
    else if (a == "--peak-tflops") ok = absl::SimpleAtod(argv[i + 1], &peak_flops), peak_flops *= 1e12;
    else if (a == "--precision") {
      const std::string v = argv[i + 1];
      ok = v == "bf16" || v == "fp32";
      precision = v == "fp32" ? kernels::Precision::kFp32 : kernels::Precision::kBf16;
    } else if (a == "--bias-epilogue") {
      const std::string v = argv[i + 1];
      ok = v == "on" || v == "off";
      options.bias_epilogue = v == "on";
    } else if (a == "--gelu-epilogue") {  // cuBLASLt's GELU and bias-gradient epilogues
      const std::string v = argv[i + 1];
      ok = v == "on" || v == "off";
      options.gelu_epilogue = v == "on";
    } else if (a == "--grouped-attention") {  // Llama: cuDNN reads the grouped key/value heads
      const std::string v = argv[i + 1];
      ok = v == "on" || v == "off";
      options.grouped_attention = v == "on";
    } else if (a == "--deterministic-attention") {  // off: cuDNN's non-deterministic backward
      const std::string v = argv[i + 1];
      ok = v == "on" || v == "off";
      options.deterministic_attention = v == "on";
    } else if (a == "--gemm-autotune") {  // on: each GEMM shape's algorithm timed among the heuristic's offers
      const std::string v = argv[i + 1];
      ok = v == "on" || v == "off";
      options.gemm_autotune = v == "on";
    } else if (a == "--attention") {
      auto path = kernels::ParseAttentionPath(argv[i + 1]);
      ok = path.ok();
      if (ok) options.attention = *path;
    } else ok = false;
    if (!ok) {
      std::fprintf(stderr,
                   "usage: gpt2_bench [--steps N] [--warmup N] [--batch B] [--peak-tflops F] [--attention auto|cudnn|fused|reference] [--bias-epilogue on|off] [--gelu-epilogue on|off]\n"
                   "                  [--grouped-attention on|off] [--deterministic-attention on|off] [--gemm-autotune on|off] [--classifier-rows N]\n"
                   "                  [--fused-grad-casts on|off]\n"
                   "                  [--arch gpt2|llama] [--precision bf16|fp32] [--device cuda:N|cuda-emulated] [--seq-len T] [--layers L] (the last three for smoke runs)\n");
      return 2;
    }
  }
  auto name = train::ParseDevice(device);
  if (!name.ok() || name->kind == kernels::BackendKind::kCpu) {
    std::fprintf(stderr, "gpt2_bench: --device %s: a cuda kind is needed\n", device.c_str());
    return 2;
  }
  if (kernels::DeviceCount(name->kind) <= name->ordinal) {
    std::fprintf(stderr, "gpt2_bench: no %s device visible\n", device.c_str());
    return 1;
  }
  jobspec::GPTConfig c;
  c.arch = arch;
  c.vocab_size = 50304;
  c.max_seq_len = 1024;
  c.n_layer = layers;
  int sample_vocab = 50257;  // the token ids drawn: GPT-2's real vocabulary, below the padded one
  if (c.llama()) {
    c.vocab_size = sample_vocab = 32000;
    c.n_kv_head = 4;
    c.ffn_hidden = 2048;
    c.rope_theta = 10000.0;
    c.norm_eps = 1e-5;
  }
  if (absl::Status v = c.Validate(); !v.ok()) {
    std::fprintf(stderr, "gpt2_bench: %s\n", std::string(v.message()).c_str());
    return 2;
  }
  const kernels::AdamWConfig adam{0.9, 0.95, 1e-8, 0.1};
  std::unique_ptr<OnDevice> held;  // in place: the engine points at its model
  int B = 0;
  std::vector<int> tries = only_batch > 0 ? std::vector<int>{only_batch} : std::vector<int>{64, 48, 32, 24, 16, 12, 8, 4, 2, 1};
  for (int b : tries) {  // the largest micro-batch that fits
    auto held_b = std::make_unique<OnDevice>();
    OnDevice& d = *held_b;
    auto be = kernels::CreateBackend(name->kind, name->ordinal, options);
    if (!be.ok()) {
      std::fprintf(stderr, "%s\n", std::string(be.status().message()).c_str());
      return 1;
    }
    d.backend = std::move(*be);
    d.model = std::make_unique<model::GPT>(c, jobspec::ModelShard{}, d.backend.get());
    d.model->InitRandom(1337);
    d.model->set_precision(precision);
    d.model->set_classifier_rows(classifier_rows);
    d.model->set_fused_grad_casts(fused_grad_casts);
    auto e = train::ZeroEngine::Create(d.model.get(), &d.solo, 0, 25, adam);
    absl::Status s = e.ok() ? absl::OkStatus() : e.status();
    if (s.ok()) {
      d.engine = std::move(*e);
      d.model->ReserveActivations(b, T);
      s = d.backend->Synchronize();  // an allocation the device refused
    }
    if (s.ok()) {
      held = std::move(held_b);
      B = b;
      break;
    }
    std::fprintf(stderr, "B %d: %s\n", b, std::string(s.message()).c_str());
  }
  if (B == 0) return 1;
  OnDevice& dev = *held;
  std::vector<int32_t> in(static_cast<size_t>(B) * T), tg(in.size());
  Rng r(7);
  for (size_t i = 0; i < in.size(); ++i) {
    in[i] = static_cast<int32_t>(r.NextU64() % sample_vocab);
    tg[i] = static_cast<int32_t>(r.NextU64() % sample_vocab);
  }
  float first_loss = NAN;  // the first step's (the same weights and tokens in every run: the paths' rounding)
  auto step = [&](int s) -> bool {
    dev.model->ZeroGrad();
    dev.engine->BeginMicroBatch(0, 1);
    const float loss = dev.model->ForwardBackward(in.data(), tg.data(), B, T, 1.0f);
    if (s == 1) first_loss = loss;
    absl::Status st = dev.model->comm_status();
    if (st.ok()) st = dev.engine->FinishStep(loss, 6e-4, s, 1.0).status();  // waits for the update
    if (!st.ok()) {
      std::fprintf(stderr, "step failed: %s\n", std::string(st.message()).c_str());
      return false;
    }
    return true;
  };
  for (int s = 1; s <= warmup; ++s) {
    if (!step(s)) return 1;
  }
  std::vector<double> times;
  for (int s = 0; s < steps; ++s) {
    const auto t0 = std::chrono::steady_clock::now();
    if (!step(warmup + 1 + s)) return 1;
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(times.begin(), times.end());
  const double med = times[times.size() / 2];
  const double tok_s = static_cast<double>(B) * T / med;
  // N: every parameter (llm.c's count, and bench/torch_gpt2.py's): GPT-2's tied wte once and
  // wpe; Llama's embed_tokens and lm_head both.
  const double n_params = static_cast<double>(dev.model->num_params());
  const double flops_per_token = 6 * n_params + 6.0 * c.n_layer * c.n_embd * T;
  const double mfu = flops_per_token * tok_s / peak_flops;
  // One profiled step: the time per op (each op synchronised, so the sum exceeds the step).
  dev.model->set_profiling(true);
  dev.model->ResetProfile();
  (void)dev.engine->TakeTiming();
  if (!step(warmup + steps + 1)) return 1;
  auto ops = dev.model->op_seconds();
  const double optimizer = dev.engine->TakeTiming().optimizer;
  if (optimizer > 0) ops.emplace_back("optimizer (norm, clip, adamw)", optimizer);
  dev.model->set_profiling(false);
  std::sort(ops.begin(), ops.end(), [](auto& a, auto& b) { return a.second > b.second; });
  double total = 0;
  for (auto& [n, s] : ops) total += s;
  size_t free_b = 0, total_b = 0;
  if (name->kind == kernels::BackendKind::kCuda) cudaMemGetInfo(&free_b, &total_b);
  const train::MemoryAccount mem = dev.engine->memory();
  char what[128] = "GPT-2 124M";
  if (c.llama())
    std::snprintf(what, sizeof what, "Llama (%d x %d, %d heads over %d KV heads, FFN %d, vocab %d)", c.n_layer, c.n_embd,
                  c.n_head, c.kv_heads(), c.ffn(), c.vocab_size);
  std::printf("gantry %s on %s, %s: B %d x T %d, %.0f parameters, model state + activations %.2f GB%s\n", what,
              dev.backend->Describe().c_str(), kernels::PrecisionName(precision), B, T, n_params,
              (mem.model_state() + mem.activations) / 1e9,
              absl::StrCat(classifier_rows > 0 ? absl::StrCat(", the classifier ", classifier_rows, " rows at a time") : "",
                           fused_grad_casts ? ", the backward's 16-bit casts fused" : "")
                  .c_str());
  std::printf("step %.1f ms (median of %d) | %.0f tokens/s | MFU %.1f%% of %.0f TFLOP/s | device memory in use %.2f GB\n",
              med * 1e3, steps, tok_s, 100 * mfu, peak_flops / 1e12, (total_b - free_b) / 1e9);
  std::printf("%-30s %10s %7s\n", "op (profiled step)", "ms", "share");
  for (auto& [n, s] : ops) std::printf("%-30s %10.2f %6.1f%%\n", n.c_str(), s * 1e3, 100 * s / total);
  std::printf("{\"impl\": \"gantry\", \"arch\": \"%s\", \"batch\": %d, \"tokens_per_s\": %.1f, \"step_ms\": %.2f, "
              "\"mfu\": %.4f, \"params\": %.0f, \"memory_gb\": %.3f, \"first_loss\": %.6f}\n",
              jobspec::ArchName(c.arch), B, tok_s, med * 1e3, mfu, n_params, (total_b - free_b) / 1e9, first_loss);
  return 0;
}

}  // namespace
}  // namespace gantry

int main(int argc, char** argv) { return gantry::Main(argc, argv); }
