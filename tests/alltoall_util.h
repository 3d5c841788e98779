// Values for the all-to-all tests (tests/worker/gloo_communicator_test, tests/gpu/
// nccl_communicator_test): what each rank sends each rank, and the check of what it received.
#pragma once

#include <cmath>
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace gantry::testing {

// The value rank `from` sends rank `to` at index i of that chunk: distinct for every (sender,
// receiver, index) of up to 4 ranks, and an integer below 2^24 (i below 2^20), so a float
// holds it exactly and equality is the check.
inline float Routed(int from, int to, size_t i) {
  return static_cast<float>((i * 4 + static_cast<size_t>(to)) * 4 + static_cast<size_t>(from));
}

// count(from, to): how many elements rank `from` sends rank `to`.
using RoutedCounts = std::function<size_t(int from, int to)>;

// Rank `rank`'s input to an all-to-all: its chunks for ranks 0 .. size-1, one after another.
inline std::vector<float> RoutedInput(int rank, int size, const RoutedCounts& count) {
  std::vector<float> in;
  for (int to = 0; to < size; ++to) {
    for (size_t i = 0; i < count(rank, to); ++i) in.push_back(Routed(rank, to, i));
  }
  return in;
}

// This rank's counts: send[q] = count(rank, q), recv[q] = count(q, rank).
inline void RoutedCountsOf(int rank, int size, const RoutedCounts& count, std::vector<size_t>* send,
                           std::vector<size_t>* recv) {
  send->assign(static_cast<size_t>(size), 0);
  recv->assign(static_cast<size_t>(size), 0);
  for (int q = 0; q < size; ++q) {
    (*send)[static_cast<size_t>(q)] = count(rank, q);
    (*recv)[static_cast<size_t>(q)] = count(q, rank);
  }
}

// Empty where out is what rank `rank` should receive (the chunks from ranks 0 .. size-1, one
// after another); else the first difference.
inline std::string CheckRouted(const std::vector<float>& out, int rank, int size, const RoutedCounts& count) {
  size_t at = 0;
  for (int from = 0; from < size; ++from) {
    for (size_t i = 0; i < count(from, rank); ++i, ++at) {
      if (at >= out.size() || out[at] != Routed(from, rank, i)) {
        return absl::StrCat("rank ", rank, " chunk from ", from, " element ", i, ": ",
                            at < out.size() ? out[at] : NAN, " != ", Routed(from, rank, i));
      }
    }
  }
  return at == out.size() ? "" : absl::StrCat("rank ", rank, ": ", out.size() - at, " elements more than sent");
}

}  // namespace gantry::testing
