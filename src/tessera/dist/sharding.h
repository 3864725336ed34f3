// Sharding of one tensor: which mesh axes split each of its dimensions (from its logical axis names
// and logical_axis_rules), the piece of the whole tensor one rank holds, and the local reorder that
// an all-gather or reduce-scatter needs when the split dimension is not the first.
//
// Rules (flax's logical_to_mesh_axes, which MaxText uses): the rules are taken in order; a rule
// applies to the tensor's first dimension with its logical name when that dimension has no mesh
// axes yet, none of the rule's mesh axes is used by another dimension of the tensor, and (Tessera's
// addition, as config's help for logical_axis_rules says) the rule's axis sizes multiply to a
// divisor of the dimension. No rule: the dimension is whole on every rank. Axes of size 1 count as
// used too, which is why MaxText lists several `embed` rules: [embed, mlp] takes mlp ->
// [fsdp_transpose, tensor] first, then the second embed rule, which avoids fsdp_transpose.
//
// Block layout: a tensor of shape [d0, ..., dk] split into n parts along dimension d is, viewed as
// [outer, D, inner] (outer = d0 x ... x d(d-1), D = dd, inner = the rest), n pieces
// [outer, D/n, inner]; an all-gather concatenates the pieces ([n, outer, D/n, inner]), which is
// the tensor itself only when outer = 1 (d = 0). blocks_to_tensor reorders the concatenation into
// the tensor; tensor_to_blocks is its inverse, applied to a full gradient before a
// reduce-scatter.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "tessera/config/config.h"
#include "tessera/core/tensor.h"

namespace tessera::dist {

using MeshSizes = std::array<int64_t, kNumMeshAxes>;

// For each dimension of a tensor with `logical_axes` and (whole, unsharded) `shape`, the mesh axes
// that split it (empty: whole).
std::vector<std::vector<MeshAxis>> mesh_axes_for(const std::vector<std::string>& logical_axes,
                                                 const Shape& shape, const std::vector<AxisRule>& rules,
                                                 const MeshSizes& sizes);

// "fsdp", "tensor+fsdp", or "-" for an empty list (logs).
std::string axes_name(const std::vector<MeshAxis>& axes);

// A hyper-rectangle of a whole tensor: the part one rank holds. offset[i] + shape[i] <= whole[i].
struct Piece {
  Shape whole;
  Shape shape;
  std::array<int64_t, kMaxDims> offset{};
  bool covers_all() const { return shape == whole; }
  std::string str() const;  // "[0:32, 0:64] of [64, 64]"
};

// The whole tensor as one piece.
Piece whole_piece(const Shape& whole);
// Part `index` of `parts` of `p` along dimension `dim` (p.shape[dim] must divide by parts).
Piece split_piece(const Piece& p, int dim, int64_t parts, int64_t index);
// The flat index in `p.whole` (row-major) of element `local` (row-major in p.shape).
int64_t whole_index(const Piece& p, int64_t local);

// Copies the elements of `src`'s piece that lie in `dst`'s piece (both row-major buffers of
// `elem_bytes`-sized elements laid out as their pieces' shapes). Returns the elements copied.
int64_t copy_overlap(const Piece& src, const void* src_data, const Piece& dst, void* dst_data,
                     size_t elem_bytes);

// [n, outer, D/n, inner] (the concatenated pieces) -> [outer, D, inner] (the tensor), and back.
// `shape` is the whole tensor's; elements of `elem_bytes`. dim 0 is a plain copy.
void blocks_to_tensor(const void* blocks, void* tensor, const Shape& shape, int dim, int64_t parts,
                      size_t elem_bytes);
void tensor_to_blocks(const void* tensor, void* blocks, const Shape& shape, int dim, int64_t parts,
                      size_t elem_bytes);

}  // namespace tessera::dist
