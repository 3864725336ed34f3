// Collectives between the processes of a job: the interface the training engine calls, with an
// MPI implementation (mpi_communicator.h, CPU) and a one-process implementation for single-device
// runs and tests. NCCL joins with the CUDA backend.
//
// A Communicator is a group of ranks (the world, or one mesh axis's group: split()). Every call is
// collective over the group: all its ranks make the same calls in the same order with the same
// counts. Buffers are raw, typed by DType; reductions are defined for f32 and f64. Failures (a
// peer that died, an MPI error) throw Error(kRuntime) naming the collective; they never hang
// silently where the library can tell.
//
// Non-blocking forms return a Request; the caller overlaps compute and calls wait() before it
// touches the buffers. progress() lets the library advance requests in flight (MPI libraries
// without a progress thread move data only inside MPI calls): the executor calls it between ops.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "tessera/core/dtype.h"

namespace tessera::dist {

enum class ReduceOp { kSum, kMax };

// Bytes of the buffers this rank passed into each kind of collective since the last reset (the
// logs' figures): all_reduce and broadcast count the buffer, all_gather the gathered result
// (size() x count) and reduce_scatter its input (size() x count), so FSDP's analytic figure is
// 2 gathers + 1 reduce-scatter of the parameters. On a ring each rank sends (size() - 1) / size()
// of an all-gather's or reduce-scatter's figure and twice that of an all-reduce's. all_to_all
// counts the whole send buffer (every row passed in, this rank's own part included: expert
// parallelism's figure is then static, tokens x top-k x emb_dim x dtype size per exchange) or,
// when the caller says so (AllToAllLayout::count_received), the whole receive buffer; and
// all_to_all_remote the part of that buffer exchanged with other ranks. Groups of one count nothing.
struct TrafficCounters {
  uint64_t all_reduce = 0, all_gather = 0, reduce_scatter = 0, broadcast = 0;
  uint64_t all_to_all = 0, all_to_all_remote = 0;
  uint64_t total() const { return all_reduce + all_gather + reduce_scatter + broadcast + all_to_all; }
};

class Communicator {
 public:
  class Request {
   public:
    virtual ~Request() = default;
    virtual void wait() = 0;  // completes the operation; idempotent
  };

  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;

  // In place: every rank ends with the element-wise reduction of all ranks' `data`.
  virtual void all_reduce(void* data, size_t count, DType dtype, ReduceOp op = ReduceOp::kSum) = 0;
  // The same for doubles (DType has no f64): loss sums, token counts and squared norms, reduced
  // without float32 rounding.
  virtual void all_reduce_f64(double* data, size_t count, ReduceOp op = ReduceOp::kSum) = 0;
  // `send` holds `count` elements; `recv` (size() * count) ends with rank r's part at r * count.
  virtual void all_gather(const void* send, void* recv, size_t count, DType dtype) = 0;
  // `send` holds size() * count elements; `recv` (count) ends with the sum over ranks of their
  // part rank() * count ... (rank() + 1) * count.
  virtual void reduce_scatter(const void* send, void* recv, size_t count, DType dtype) = 0;
  virtual void broadcast(void* data, size_t count, DType dtype, int root) = 0;
  virtual void barrier() = 0;

  virtual std::unique_ptr<Request> all_gather_async(const void* send, void* recv, size_t count,
                                                    DType dtype) = 0;
  // `accumulate`: recv ends with its own values plus that sum (FSDP adds each micro-step's gradient
  // piece into the step's without a staging buffer).
  virtual std::unique_ptr<Request> reduce_scatter_async(const void* send, void* recv, size_t count,
                                                        DType dtype, bool accumulate = false) = 0;
  virtual std::unique_ptr<Request> all_reduce_async(void* data, size_t count, DType dtype) = 0;  // sum
  // The ragged all-to-all (MPI_Ialltoallv): rank r receives send_counts[r] elements from
  // send + send_offsets[r], and this rank receives recv_counts[s] elements from rank s at
  // recv + recv_offsets[s] (elements of `dtype`; size() entries each; the caller has exchanged the
  // counts). Moved as bits, never reduced. A group of one copies its own part; this default does
  // only that (the MPI communicator overrides it).
  struct AllToAllLayout {
    const size_t* send_counts;
    const size_t* send_offsets;
    const size_t* recv_counts;
    const size_t* recv_offsets;
    bool count_received = false;  // the traffic counters count the receive side (see above)
  };
  virtual std::unique_ptr<Request> all_to_all_async(const void* send, void* recv,
                                                    const AllToAllLayout& layout, DType dtype);
  virtual void progress() {}
  // Memory this communicator holds for its non-blocking collectives' scratch (mapped once, reused).
  virtual size_t scratch_bytes() const { return 0; }

  // The sub-group of the ranks that pass the same `color`, ordered by `key` (MPI_Comm_split).
  virtual std::unique_ptr<Communicator> split(int color, int key) = 0;

  const TrafficCounters& traffic() const { return traffic_; }
  void reset_traffic() { traffic_ = {}; }

 protected:
  TrafficCounters traffic_;
};

// A group of one: collectives copy or do nothing.
std::unique_ptr<Communicator> make_single_process_communicator();

}  // namespace tessera::dist
