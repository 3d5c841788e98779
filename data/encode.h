// Encoding many documents on every core: each thread takes the next document and keeps its
// own word cache; the ids come back in the documents' order.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/strings/string_view.h"
#include "data/tokenizer.h"

namespace gantry::data {

// docs[i]'s ids in the result's [i]. threads <= 0: one per core. progress, when given, is
// called from the calling thread with the bytes encoded so far, about every 100 ms.
// cache_words: each thread's word cache (0: none).
std::vector<std::vector<uint32_t>> EncodeDocuments(const Tokenizer& tokenizer, const std::vector<absl::string_view>& docs,
                                                   int threads,
                                                   const std::function<void(size_t bytes_done)>& progress = nullptr,
                                                   size_t cache_words = size_t{1} << 18);

}  // namespace gantry::data
