// Sharding rules, pieces and the block reorder (sharding.h).
#include "tessera/dist/sharding.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "tessera/core/error.h"

namespace tessera::dist {

namespace {

int axis_index(std::string_view name) {
  for (int a = 0; a < kNumMeshAxes; ++a)
    if (kMeshAxes[a].axis == name) return a;
  return -1;
}

}  // namespace

std::vector<std::vector<MeshAxis>> mesh_axes_for(const std::vector<std::string>& logical_axes,
                                                 const Shape& shape, const std::vector<AxisRule>& rules,
                                                 const MeshSizes& sizes) {
  TESSERA_ASSERT(static_cast<int>(logical_axes.size()) == shape.rank());
  std::vector<std::vector<MeshAxis>> out(logical_axes.size());
  std::vector<bool> assigned(logical_axes.size(), false);
  std::array<bool, kNumMeshAxes> used{};
  for (const AxisRule& r : rules) {
    const auto it = std::find(logical_axes.begin(), logical_axes.end(), r.logical);
    if (it == logical_axes.end()) continue;
    const auto d = static_cast<size_t>(it - logical_axes.begin());
    if (assigned[d]) continue;
    std::vector<MeshAxis> axes;
    int64_t product = 1;
    bool free = true;
    for (const std::string& m : r.mesh_axes) {
      const int a = axis_index(m);
      if (a < 0)
        fail(ErrorKind::kConfig, "logical_axis_rules: '{}' (for {}) is not a mesh axis", m, r.logical);
      free = free && !used[a] && std::find(axes.begin(), axes.end(), static_cast<MeshAxis>(a)) == axes.end();
      axes.push_back(static_cast<MeshAxis>(a));
      product *= sizes[a];
    }
    if (!free || shape[static_cast<int>(d)] % product != 0) continue;
    assigned[d] = true;
    for (MeshAxis a : axes) used[static_cast<int>(a)] = true;
    // Only axes that split something are kept: size-1 axes are "used" but split nothing.
    for (MeshAxis a : axes)
      if (sizes[static_cast<int>(a)] > 1) out[d].push_back(a);
  }
  return out;
}

std::string axes_name(const std::vector<MeshAxis>& axes) {
  if (axes.empty()) return "-";
  std::string s;
  for (MeshAxis a : axes) {
    if (!s.empty()) s += '+';
    s += kMeshAxes[static_cast<int>(a)].axis;
  }
  return s;
}

std::string Piece::str() const {
  std::string s = "[";
  for (int i = 0; i < shape.rank(); ++i)
    s += fmt::format("{}{}:{}", i ? ", " : "", offset[i], offset[i] + shape[i]);
  return s + "] of " + whole.str();
}

Piece whole_piece(const Shape& whole) {
  return Piece{.whole = whole, .shape = whole};
}

Piece split_piece(const Piece& p, int dim, int64_t parts, int64_t index) {
  TESSERA_ASSERT(dim >= 0 && dim < p.shape.rank() && parts >= 1 && index >= 0 && index < parts);
  TESSERA_ASSERT(p.shape[dim] % parts == 0);
  Piece out = p;
  out.shape[dim] = p.shape[dim] / parts;
  out.offset[dim] = p.offset[dim] + index * out.shape[dim];
  return out;
}

int64_t whole_index(const Piece& p, int64_t local) {
  int64_t idx = 0, stride = 1;
  for (int i = p.shape.rank() - 1; i >= 0; --i) {
    const int64_t c = local % p.shape[i];
    local /= p.shape[i];
    idx += (c + p.offset[i]) * stride;
    stride *= p.whole[i];
  }
  return idx;
}

int64_t copy_overlap(const Piece& src, const void* src_data, const Piece& dst, void* dst_data,
                     size_t elem_bytes) {
  TESSERA_ASSERT(src.whole == dst.whole);
  const int rank = src.whole.rank();
  std::array<int64_t, kMaxDims> lo{}, hi{};
  for (int i = 0; i < rank; ++i) {
    lo[i] = std::max(src.offset[i], dst.offset[i]);
    hi[i] = std::min(src.offset[i] + src.shape[i], dst.offset[i] + dst.shape[i]);
    if (hi[i] <= lo[i]) return 0;
  }
  if (rank == 0) {
    std::memcpy(dst_data, src_data, elem_bytes);
    return 1;
  }
  // Copy runs along the last dimension; iterate the others as an odometer.
  const int64_t run = hi[rank - 1] - lo[rank - 1];
  std::array<int64_t, kMaxDims> at = lo;
  int64_t copied = 0;
  for (;;) {
    int64_t s = 0, d = 0;
    for (int i = 0; i < rank; ++i) {
      s = s * src.shape[i] + (at[i] - src.offset[i]);
      d = d * dst.shape[i] + (at[i] - dst.offset[i]);
    }
    std::memcpy(static_cast<char*>(dst_data) + static_cast<size_t>(d) * elem_bytes,
                static_cast<const char*>(src_data) + static_cast<size_t>(s) * elem_bytes,
                static_cast<size_t>(run) * elem_bytes);
    copied += run;
    int i = rank - 2;
    for (; i >= 0; --i) {
      if (++at[i] < hi[i]) break;
      at[i] = lo[i];
    }
    if (i < 0) break;
  }
  return copied;
}

namespace {

struct BlockGeometry {
  int64_t outer = 1, run_bytes = 0;  // run: D/n x inner elements, contiguous in both layouts
};

BlockGeometry geometry(const Shape& shape, int dim, int64_t parts, size_t elem_bytes) {
  TESSERA_ASSERT(dim >= 0 && dim < shape.rank() && shape[dim] % parts == 0);
  BlockGeometry g;
  int64_t inner = 1;
  for (int i = 0; i < dim; ++i) g.outer *= shape[i];
  for (int i = dim + 1; i < shape.rank(); ++i) inner *= shape[i];
  g.run_bytes = shape[dim] / parts * inner * static_cast<int64_t>(elem_bytes);
  return g;
}

// blocks[p][o] <-> tensor[o][p]: runs of run_bytes. `to_tensor` picks the direction.
void reorder(const char* src, char* dst, const Shape& shape, int dim, int64_t parts, size_t elem_bytes,
             bool to_tensor) {
  const BlockGeometry g = geometry(shape, dim, parts, elem_bytes);
  const int64_t total = g.outer * parts;
  const auto run = static_cast<size_t>(g.run_bytes);
  // Each (o, p) is one memcpy of a run; threads share the outer rows when there is enough work.
#pragma omp parallel for schedule(static) if (total * g.run_bytes > (int64_t{1} << 20))
  for (int64_t k = 0; k < total; ++k) {
    const int64_t o = k / parts, p = k % parts;
    const int64_t block_at = p * g.outer + o, tensor_at = o * parts + p;
    if (to_tensor)
      std::memcpy(dst + tensor_at * g.run_bytes, src + block_at * g.run_bytes, run);
    else
      std::memcpy(dst + block_at * g.run_bytes, src + tensor_at * g.run_bytes, run);
  }
}

}  // namespace

void blocks_to_tensor(const void* blocks, void* tensor, const Shape& shape, int dim, int64_t parts,
                      size_t elem_bytes) {
  reorder(static_cast<const char*>(blocks), static_cast<char*>(tensor), shape, dim, parts, elem_bytes, true);
}

void tensor_to_blocks(const void* tensor, void* blocks, const Shape& shape, int dim, int64_t parts,
                      size_t elem_bytes) {
  reorder(static_cast<const char*>(tensor), static_cast<char*>(blocks), shape, dim, parts, elem_bytes, false);
}

}  // namespace tessera::dist
