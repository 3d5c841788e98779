// CRC-32C (Castagnoli), the checksum of every checkpoint chunk on the wire and at rest.
#pragma once

#include <cstddef>
#include <cstdint>

namespace gantry {

// Extends crc with data; start from 0.
uint32_t Crc32c(const void* data, size_t n, uint32_t crc = 0);

}  // namespace gantry
