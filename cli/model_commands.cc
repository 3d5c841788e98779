// sample for both front ends (model_commands.h).
#include "cli/model_commands.h"

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "data/tokenizer.h"
#include "kernels/threads.h"
#include "model/hf_io.h"
#include "model/sample.h"

namespace gantry::cli {

void DefineSampleFlags(CommandFlags& flags, SampleFlags* s) {
  flags.String("prompt", &s->prompt, "TEXT", "the text to continue (empty: from the end-of-text token)")
      .Int("tokens", &s->tokens, "N", "how many tokens to generate")
      .Float("temperature", &s->temperature, "T", "softmax temperature; 0: greedy")
      .Int("top-k", &s->top_k, "K", "sample among the K likeliest tokens; 0: the whole vocabulary")
      .Int("seed", &s->seed, "S", "the sampler's random seed")
      .Int("threads", &s->threads, "N", "CPU threads; 0: one per CPU")
      .String("tokenizer", &s->tokenizer, "PATH",
              "the tokenizer (tokenizer.json, or a vocab.json + merges.txt directory); default: the model "
              "directory's, else the byte tokenizer");
}

absl::Status SampleModel(const std::string& model_dir, const SampleFlags& s) {
  kernels::ConfigureThreads(s.threads);
  auto model = model::LoadHFModel(model_dir);
  if (!model.ok()) return model.status();
  auto tok = data::TokenizerForModel(model_dir, s.tokenizer, (*model)->config().vocab_size);
  if (!tok.ok()) return tok.status();
  model::SampleOptions o;
  o.tokens = s.tokens;
  o.temperature = s.temperature;
  o.top_k = s.top_k;
  o.seed = static_cast<uint64_t>(s.seed);
  if ((*tok)->end_of_text() >= 0) o.start = static_cast<uint32_t>((*tok)->end_of_text());
  std::fputs(s.prompt.c_str(), stdout);
  auto out = model::Sample(**model, (*tok)->Encode(s.prompt), o, [&](uint32_t t) {
    std::fputs((*tok)->TokenText(t).c_str(), stdout);
    std::fflush(stdout);
  });
  std::fputc('\n', stdout);
  return out.status();
}

}  // namespace gantry::cli
