// The expert-axis exchange ops of the op table (op_table.h), which sharding_expert.h's pass inserts
// around a MoE block's grouped matmuls: moe_to_experts (the count exchange and the ragged
// all-to-all of the dispatched rows to the ranks that hold their experts) and moe_from_experts
// (the rows back), each with its backward, the other's data movement on the gradients.
//
// Rows: the dispatch's xs [R, E] is sorted by global expert, so the rows for rank r (its experts
// [r * Xl, (r + 1) * Xl)) are contiguous. With counts C [EP, X] (row s: rank s's group sizes):
//   rank me sends send[r] = sum over r's experts e of C[me, e] rows to r, from their place in xs;
//   rank me receives recv[s] = sum over my experts e of C[s, e] rows from s, in source order, each
//   source's rows grouped by my local expert; the regroup then orders them by (local expert,
//   source), which the grouped matmul needs (local group sizes L[e] = sum over s of C[s, e]).
// moe_from_experts is the inverse: the regroup undone, then send and receive swapped. Rows past
// the received total are zero. Rows travel as bits (f32 or bf16); nothing is summed, so N ranks
// give the one-rank rows exactly.
#include <cstring>

#include "tessera/core/error.h"
#include "tessera/dist/communicator.h"
#include "tessera/graph/autodiff.h"
#include "tessera/graph/op_families.h"
#include "tessera/graph/sharding_expert.h"
#include "tessera/graph/workspace.h"

namespace tessera::graph {

namespace {

// The two directions' row counts and offsets, per rank, from the counts matrix.
struct ExchangeRows {
  std::vector<size_t> send, send_at, recv, recv_at;  // the dispatch direction, in rows
  std::vector<int64_t> local_sizes;                  // [Xl]
  int64_t received = 0;
};

ExchangeRows exchange_rows(const MoeExchangeAttrs& a, const int32_t* counts) {
  const int64_t ranks = a.ranks, local = a.experts / a.ranks;
  ExchangeRows x;
  x.send.assign(static_cast<size_t>(ranks), 0);
  x.recv.assign(static_cast<size_t>(ranks), 0);
  x.send_at.assign(static_cast<size_t>(ranks), 0);
  x.recv_at.assign(static_cast<size_t>(ranks), 0);
  x.local_sizes.assign(static_cast<size_t>(local), 0);
  for (int64_t r = 0; r < ranks; ++r)
    for (int64_t e = 0; e < local; ++e) {
      x.send[static_cast<size_t>(r)] += static_cast<size_t>(counts[a.rank * a.experts + r * local + e]);
      const int32_t c = counts[r * a.experts + a.rank * local + e];
      x.recv[static_cast<size_t>(r)] += static_cast<size_t>(c);
      x.local_sizes[static_cast<size_t>(e)] += c;
    }
  for (int64_t r = 1; r < ranks; ++r) {
    x.send_at[static_cast<size_t>(r)] =
        x.send_at[static_cast<size_t>(r - 1)] + x.send[static_cast<size_t>(r - 1)];
    x.recv_at[static_cast<size_t>(r)] =
        x.recv_at[static_cast<size_t>(r - 1)] + x.recv[static_cast<size_t>(r - 1)];
  }
  x.received = static_cast<int64_t>(x.recv_at.back() + x.recv.back());
  return x;
}

// Rows -> elements of a row of `width`.
std::vector<size_t> elements(const std::vector<size_t>& rows, int64_t width) {
  std::vector<size_t> out(rows);
  for (size_t& v : out) v *= static_cast<size_t>(width);
  return out;
}

// Starts moving `src` rows to `dst` over the expert axis: the dispatch direction (forward), or
// with `back` the combine direction. count_received: the traffic counters count the receive side.
std::unique_ptr<dist::Communicator::Request> start_all_to_all(const RunContext& c, const ExchangeRows& x,
                                                              const Tensor& src, const Tensor& dst, bool back,
                                                              bool count_received) {
  const int64_t width = src.dim(1);
  const std::vector<size_t> sc = elements(back ? x.recv : x.send, width);
  const std::vector<size_t> so = elements(back ? x.recv_at : x.send_at, width);
  const std::vector<size_t> rc = elements(back ? x.send : x.recv, width);
  const std::vector<size_t> ro = elements(back ? x.send_at : x.recv_at, width);
  return c.expert->all_to_all_async(src.data(), dst.data(),
                                    {.send_counts = sc.data(),
                                     .send_offsets = so.data(),
                                     .recv_counts = rc.data(),
                                     .recv_offsets = ro.data(),
                                     .count_received = count_received},
                                    src.dtype());
}

// The regroup of received rows: (source, local expert) order in `by_source` <-> (local expert,
// source) order in `by_expert`. `to_expert` picks the direction.
void regroup(const MoeExchangeAttrs& a, const int32_t* counts, const ExchangeRows& x, const Tensor& by_source,
             const Tensor& by_expert, bool to_expert) {
  const int64_t local = a.experts / a.ranks;
  const size_t row = static_cast<size_t>(by_source.dim(1)) * dtype_size(by_source.dtype());
  char* s = static_cast<char*>(by_source.data());
  char* e = static_cast<char*>(by_expert.data());
  std::vector<int64_t> at(static_cast<size_t>(local), 0);  // next row of each local expert's group
  for (int64_t g = 1; g < local; ++g)
    at[static_cast<size_t>(g)] = at[static_cast<size_t>(g - 1)] + x.local_sizes[static_cast<size_t>(g - 1)];
  for (int64_t r = 0; r < a.ranks; ++r) {
    int64_t from = static_cast<int64_t>(x.recv_at[static_cast<size_t>(r)]);
    for (int64_t g = 0; g < local; ++g) {
      const int64_t n = counts[r * a.experts + a.rank * local + g];
      char* ps = s + static_cast<size_t>(from) * row;
      char* pe = e + static_cast<size_t>(at[static_cast<size_t>(g)]) * row;
      if (n > 0) std::memcpy(to_expert ? pe : ps, to_expert ? ps : pe, static_cast<size_t>(n) * row);
      from += n;
      at[static_cast<size_t>(g)] += n;
    }
  }
}

// The dispatch direction: rows [R, E] -> grouped by local expert [Rb, E] (rows past the received
// ones zeroed), through the staging buffer.
void to_experts(const RunContext& c, const Node& n, const int32_t* counts, const Tensor& rows,
                const Tensor& grouped, const Tensor& staging) {
  const MoeExchangeAttrs& a = n.attr<MoeExchangeAttrs>();
  const ExchangeRows x = exchange_rows(a, counts);
  // Every rank sees the whole counts matrix, so all of them find an overflow (anyone's) before the
  // exchange and fail together, naming the largest load.
  int64_t most = 0, at_rank = 0;
  for (int64_t r = 0; r < a.ranks; ++r) {
    int64_t load = 0;
    const int64_t local = a.experts / a.ranks;
    for (int64_t s = 0; s < a.ranks; ++s)
      for (int64_t e = 0; e < local; ++e) load += counts[s * a.experts + r * local + e];
    if (load > most) most = load, at_rank = r;
  }
  if (most > a.buffer_rows)
    fail(ErrorKind::kRuntime,
         "{} (step {}, layer {}): expert rank {} receives {} rows, more than its buffer of {} rows "
         "(ragged_buffer_factor={} x the balanced {} rows{}); raise ragged_buffer_factor, or set it to -1 "
         "for the worst case (no row is dropped)",
         n.name, c.step, n.layer, at_rank, most, a.buffer_rows, a.buffer_factor, a.rows,
         a.buffer_factor <= 0 ? ", the worst case" : "");
  start_all_to_all(c, x, rows, staging, /*back=*/false, /*count_received=*/false)->wait();
  regroup(a, counts, x, staging, grouped, /*to_expert=*/true);
  const size_t row = static_cast<size_t>(grouped.dim(1)) * dtype_size(grouped.dtype());
  std::memset(static_cast<char*>(grouped.data()) + static_cast<size_t>(x.received) * row, 0,
              static_cast<size_t>(a.buffer_rows - x.received) * row);
}

// The combine direction: grouped [Rb, E] -> the dispatch's rows [R, E]. A deferred node leaves
// the all-to-all in flight for its kMoeExchangeWait.
void from_experts(const RunContext& c, const Node& n, const int32_t* counts, const Tensor& grouped,
                  const Tensor& rows, const Tensor& staging) {
  const MoeExchangeAttrs& a = n.attr<MoeExchangeAttrs>();
  const ExchangeRows x = exchange_rows(a, counts);
  regroup(a, counts, x, staging, grouped, /*to_expert=*/false);
  auto request = start_all_to_all(c, x, staging, rows, /*back=*/true, /*count_received=*/true);
  if (!a.deferred) return request->wait();
  TESSERA_ASSERT(c.pending != nullptr);
  const auto [at, fresh] = c.pending->requests.try_emplace(n.out[0], std::move(request));
  TESSERA_CHECK(fresh, ErrorKind::kInternal, "{}: started while its previous exchange is in flight", n.name);
}

// ---- moe_to_experts: in xs [R, E], sizes [X]; out xl [Rb, E], local sizes [Xl], counts [EP, X],
// staging [Rb, E]
std::vector<OutputSpec> to_infer(const Graph& g, const Node& n) {
  const MoeExchangeAttrs& a = n.attr<MoeExchangeAttrs>();
  const Value& xs = g.value(n.in[0]);
  TESSERA_CHECK_SHAPE(
      xs.shape.rank() == 2 && xs.shape[0] == a.rows && g.value(n.in[1]).shape == Shape{a.experts},
      "{}: exchange of rows {} with sizes {} ({} rows of {} experts)", n.name, xs.shape.str(),
      g.value(n.in[1]).shape.str(), a.rows, a.experts);
  const Shape buffer{a.buffer_rows, xs.shape[1]};
  return {{"", buffer, xs.dtype},
          {".group_sizes", Shape{a.experts / a.ranks}, DType::kI32},
          {".counts", Shape{a.ranks, a.experts}, DType::kI32},
          {".staging", buffer, xs.dtype}};
}

void to_backward(GradBuilder& gb, const Node& f, ValueId dy) {
  const ValueId xs = f.in[0];
  if (!gb.needs(xs)) return;
  Graph& g = gb.graph();
  const ValueId dxs = gb.grad_value(xs);
  const ValueId staging =
      g.activation("d." + g.value(f.out[3]).name, g.value(f.out[3]).shape, g.value(xs).dtype);
  g.value(staging).layer = f.layer;
  gb.add(gb.node(OpKind::kMoeToExpertsBwd, {dy, f.out[2]}, {dxs, staging}, ".bwd"));
  gb.contribute(xs, dxs);
}

void to_run(const RunContext& c, const Node& n) {
  const MoeExchangeAttrs& a = n.attr<MoeExchangeAttrs>();
  const Tensor &sizes = c.in(n, 1), &local = c.out(n, 1), &counts = c.out(n, 2);
  c.expert->all_gather(sizes.data(), counts.data(), static_cast<size_t>(a.experts), DType::kI32);
  const ExchangeRows x = exchange_rows(a, counts.ptr<int32_t>());
  for (size_t e = 0; e < x.local_sizes.size(); ++e)
    local.ptr<int32_t>()[e] = static_cast<int32_t>(x.local_sizes[e]);
  to_experts(c, n, counts.ptr<int32_t>(), c.in(n, 0), c.out(n, 0), c.out(n, 3));
}

void to_bwd_run(const RunContext& c, const Node& n) {  // in: dxl, counts; out: dxs, staging
  from_experts(c, n, c.in(n, 1).ptr<int32_t>(), c.in(n, 0), c.out(n, 0), c.out(n, 1));
}

// ---- moe_from_experts: in yl [Rb, E], counts; out ys [R, E], staging [Rb, E]
std::vector<OutputSpec> from_infer(const Graph& g, const Node& n) {
  const MoeExchangeAttrs& a = n.attr<MoeExchangeAttrs>();
  const Value& yl = g.value(n.in[0]);
  TESSERA_CHECK_SHAPE(yl.shape.rank() == 2 && yl.shape[0] == a.buffer_rows,
                      "{}: exchange of expert rows {} for a buffer of {} rows", n.name, yl.shape.str(),
                      a.buffer_rows);
  return {{"", Shape{a.rows, yl.shape[1]}, yl.dtype}, {".staging", yl.shape, yl.dtype}};
}

void from_backward(GradBuilder& gb, const Node& f, ValueId dy) {
  const ValueId yl = f.in[0];
  if (!gb.needs(yl)) return;
  Graph& g = gb.graph();
  const ValueId dyl = gb.grad_value(yl);
  const ValueId staging = g.activation("d." + g.value(f.out[1]).name, g.value(yl).shape, g.value(yl).dtype);
  g.value(staging).layer = f.layer;
  gb.add(gb.node(OpKind::kMoeFromExpertsBwd, {dy, f.in[1]}, {dyl, staging}, ".bwd"));
  gb.contribute(yl, dyl);
}

void from_run(const RunContext& c, const Node& n) {
  from_experts(c, n, c.in(n, 1).ptr<int32_t>(), c.in(n, 0), c.out(n, 0), c.out(n, 1));
}

void from_bwd_run(const RunContext& c, const Node& n) {  // in: dys, counts; out: dyl, staging
  to_experts(c, n, c.in(n, 1).ptr<int32_t>(), c.in(n, 0), c.out(n, 0), c.out(n, 1));
}

// ---- moe_exchange_wait: in: a deferred exchange's outputs; ends its all-to-all.
void wait_run(const RunContext& c, const Node& n) {
  TESSERA_ASSERT(c.pending != nullptr);
  const auto it = c.pending->requests.find(n.in[0]);
  TESSERA_CHECK(it != c.pending->requests.end(), ErrorKind::kInternal, "{}: no exchange in flight", n.name);
  std::unique_ptr<dist::Communicator::Request> request = std::move(it->second);
  c.pending->requests.erase(it);
  request->wait();
}

// The rows that move: the rank's own R rows out and, with balanced routing, as many in; the
// receive buffer and its staging are touched only as far as they are filled.
double exchange_bytes(const Graph& g, const Node& n) {
  const MoeExchangeAttrs& a = n.attr<MoeExchangeAttrs>();
  return rows_bytes(g, n, a.buffer_rows, std::min(a.rows, a.buffer_rows));
}

}  // namespace

std::vector<OpDef> expert_op_defs() {
  return {
      {.kind = OpKind::kMoeToExperts,
       .name = "moe_to_experts",
       .infer = to_infer,
       .backward = to_backward,
       .run = to_run,
       .bytes = exchange_bytes},
      {.kind = OpKind::kMoeToExpertsBwd,
       .name = "moe_to_experts_bwd",
       .run = to_bwd_run,
       .bytes = exchange_bytes},
      {.kind = OpKind::kMoeFromExperts,
       .name = "moe_from_experts",
       .infer = from_infer,
       .backward = from_backward,
       .run = from_run,
       .bytes = exchange_bytes},
      {.kind = OpKind::kMoeFromExpertsBwd,
       .name = "moe_from_experts_bwd",
       .run = from_bwd_run,
       .bytes = exchange_bytes},
      {.kind = OpKind::kMoeExchangeWait,
       .name = "moe_exchange_wait",
       .run = wait_run,
       .bytes = [](const Graph&, const Node&) { return 0.0; }},  // touches no data
  };
}

}  // namespace tessera::graph
