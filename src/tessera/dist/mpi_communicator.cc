// The Communicator over an MPI communicator, and MPI's start and end (mpi_communicator.h).
//
// Each blocking collective maps to one MPI call: all_reduce -> MPI_Allreduce (in place),
// all_gather -> MPI_Allgather (MPI_IN_PLACE when `send` already sits at this rank's place in
// `recv`), reduce_scatter -> MPI_Reduce_scatter_block, broadcast -> MPI_Bcast. Every call goes
// through check(), which turns a return code other than MPI_SUCCESS into Error(kRuntime) naming
// the call.
//
// The non-blocking forms are Tessera's own schedules of point-to-point messages (P2pCollective
// below), advanced by progress() and wait(), on a duplicate of the communicator so that their
// messages never meet anything else:
//   - all_gather: every rank sends its part to every other rank, which receives it in place
//     (one round; with shared memory each part is copied once, straight into the result);
//   - reduce_scatter: a ring of size() - 1 rounds; in round s rank r passes its running sum of
//     part r - s - 1 to rank r + 1 and adds its own contribution to what arrives from r - 1, so
//     each rank sends and receives (size() - 1) / size() of the buffer and reduces only its share;
//   - all_reduce: the same ring over size() near-equal parts of the buffer, then the all_gather.
// The ragged all-to-all (expert parallelism) is MPI's own MPI_Ialltoallv over byte counts: it
// needs no scratch and no reduction, and its request is waited like the others.
// OpenMPI's own non-blocking reduce-scatter (coll/libnbc in 4.1) reduces the whole buffer on rank 0
// and scatters it from there, through a temporary buffer it allocates at every call: on 2 ranks
// that doubled the bytes moved and put all the reductions and fresh-page faults on rank 0
// (bench/RESULTS.md). The schedules here take their scratch blocks from a pool of pre-faulted,
// huge-page arenas that the communicator keeps, so that after the first step nothing is allocated.
// MPI counts are `int`: a buffer of more than INT_MAX elements is refused (kRuntime) rather than
// silently truncated; Tessera's largest single buffer (a layer's gradients) is far below it.
//
// Groups of one rank (a mesh axis of size 1 split out of a larger world) short-circuit like the
// single-process communicator: no MPI call, no traffic counted.
//
// The only calls whose status is not turned into an Error are those with nobody to report to:
// MPI_Finalize at exit, MPI_Wait and MPI_Comm_free in destructors (a destructor must not throw;
// the wait's error reaches the caller through wait()), MPI_Abort (it does not return), and the
// MPI_Initialized / MPI_Finalized queries of mpi_active(), which MPI allows at any time.
#include "tessera/dist/mpi_communicator.h"

#include "tessera/core/stack_trace.h"

// The C API only: OpenMPI's and MPICH's mpi.h pull in the deprecated C++ bindings (which need
// libmpi_cxx) when compiled as C++ unless told not to.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <utility>
#include <vector>

#include "tessera/core/arena.h"
#include "tessera/core/error.h"

namespace tessera::dist {

namespace {

void check(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS) len = 0;
  fail(ErrorKind::kRuntime, "{} failed: {} (MPI error {}; did another rank of the job stop?)", call,
       len > 0 ? std::string(msg, static_cast<size_t>(len)) : std::string("unknown error"), rc);
}

MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::kF32:
      return MPI_FLOAT;
    case DType::kBF16:
      return MPI_UINT16_T;  // moved as bits; never reduced
    case DType::kI32:
      return MPI_INT32_T;
    case DType::kI64:
      return MPI_INT64_T;
    case DType::kU8:
      return MPI_UINT8_T;
  }
  fail(ErrorKind::kInternal, "no MPI type for dtype {}", static_cast<int>(t));
}

MPI_Op mpi_op(ReduceOp op) {
  return op == ReduceOp::kSum ? MPI_SUM : MPI_MAX;
}

int mpi_count(size_t count, const char* call) {
  TESSERA_CHECK(count <= static_cast<size_t>(INT_MAX), ErrorKind::kRuntime,
                "{}: {} elements exceed MPI's int count; split the buffer", call, count);
  return static_cast<int>(count);
}

void check_reducible(DType t, const char* call) {
  TESSERA_CHECK(t == DType::kF32 || t == DType::kI32 || t == DType::kI64, ErrorKind::kInternal,
                "{}: reductions of {} are not defined", call, dtype_name(t));
}

void finalize_at_exit() {
  int finalized = 0, initialized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Finalize();
}

class MpiRequest final : public Communicator::Request {
 public:
  MpiRequest(MPI_Request r, const char* call) : req_(r), call_(call) {}
  ~MpiRequest() override {
    // A request must complete before its buffers go away; errors are the caller's to see in
    // wait(). While an exception unwinds the stack the peers may never join this collective, so
    // the request is left to MPI_Abort (cli/) rather than waited for.
    if (req_ != MPI_REQUEST_NULL && mpi_active() && std::uncaught_exceptions() == 0)
      MPI_Wait(&req_, MPI_STATUS_IGNORE);
  }
  void wait() override {
    if (req_ == MPI_REQUEST_NULL) return;
    CollectiveScope scope(call_);
    check(MPI_Wait(&req_, MPI_STATUS_IGNORE), call_);
  }

 private:
  MPI_Request req_;
  const char* call_;
};

// MPI_Ialltoallv's request: its int counts and displacements must live until it completes.
class AllToAllRequest final : public Communicator::Request {
 public:
  explicit AllToAllRequest(size_t ranks) : ints_(4 * ranks) {}
  int* counts(int which) { return ints_.data() + static_cast<size_t>(which) * (ints_.size() / 4); }
  MPI_Request* request() { return &req_; }
  ~AllToAllRequest() override {
    // As MpiRequest: complete before the buffers go, unless an exception unwinds (cli/ aborts).
    if (req_ != MPI_REQUEST_NULL && mpi_active() && std::uncaught_exceptions() == 0)
      MPI_Wait(&req_, MPI_STATUS_IGNORE);
  }
  void wait() override {
    if (req_ == MPI_REQUEST_NULL) return;
    CollectiveScope scope("MPI_Ialltoallv");
    check(MPI_Wait(&req_, MPI_STATUS_IGNORE), "MPI_Ialltoallv");
  }

 private:
  std::vector<int> ints_;  // send counts, send displacements, receive counts, receive displacements
  MPI_Request req_ = MPI_REQUEST_NULL;
};

// ---- non-blocking collectives as point-to-point schedules

// `dst[i] = a[i] + b[i]`, or with `accumulate` `dst[i] += a[i] + b[i]`, for the reducible dtypes.
template <typename T>
void add_arrays(void* dst, const void* a, const void* b, size_t n, bool accumulate) {
  T* d = static_cast<T*>(dst);
  const T* x = static_cast<const T*>(a);
  const T* y = static_cast<const T*>(b);
  const auto count = static_cast<int64_t>(n);
  // The branches differ (+= and =); clang-tidy compares the omp directives alone.
  if (accumulate) {  // NOLINT(bugprone-branch-clone)
#pragma omp parallel for simd schedule(static) if (count > (int64_t{1} << 18))
    for (int64_t i = 0; i < count; ++i) d[i] += x[i] + y[i];
  } else {
#pragma omp parallel for simd schedule(static) if (count > (int64_t{1} << 18))
    for (int64_t i = 0; i < count; ++i) d[i] = x[i] + y[i];
  }
}

void add_arrays(DType t, void* dst, const void* a, const void* b, size_t n, bool accumulate = false) {
  switch (t) {
    case DType::kF32:
      return add_arrays<float>(dst, a, b, n, accumulate);
    case DType::kI32:
      return add_arrays<int32_t>(dst, a, b, n, accumulate);
    case DType::kI64:
      return add_arrays<int64_t>(dst, a, b, n, accumulate);
    case DType::kBF16:
    case DType::kU8:
      break;
  }
  fail(ErrorKind::kInternal, "no sum for dtype {}", dtype_name(t));
}

// Scratch blocks for the rings: carved from pre-faulted huge-page chunks and reused. A released
// block goes to a free list; a request takes the smallest free block that fits, else carves a new
// one. Training asks for the same sizes every step, so the pool grows during the first step (to
// the most blocks in flight at once) and then stays.
class ScratchPool {
 public:
  char* acquire(size_t bytes) {
    bytes = (std::max<size_t>(bytes, 1) + Arena::kAlignment - 1) / Arena::kAlignment * Arena::kAlignment;
    if (auto it = free_.lower_bound(bytes); it != free_.end()) {
      char* p = it->second;
      free_.erase(it);
      return p;
    }
    if (chunks_.empty() || chunks_.back().capacity() - chunks_.back().used() < bytes)
      chunks_.emplace_back(std::max(bytes, kChunk), "collective scratch");
    char* p = static_cast<char*>(chunks_.back().allocate(bytes));
    size_of_[p] = bytes;
    return p;
  }
  void release(char* p) { free_.emplace(size_of_.at(p), p); }
  size_t bytes() const {
    size_t n = 0;
    for (const Arena& a : chunks_) n += a.capacity();
    return n;
  }

 private:
  static constexpr size_t kChunk = size_t{16} << 20;
  std::vector<Arena> chunks_;  // an Arena keeps its mapping when the vector moves it
  std::multimap<size_t, char*> free_;
  std::map<char*, size_t> size_of_;
};

// One non-blocking collective in flight (see the top of this file). Rounds start when the
// previous one has completed, inside advance(): called by the communicator's progress() and by
// wait(). `offsets` splits the buffer into size() parts (part q: [offsets[q], offsets[q + 1]),
// in elements).
class P2pCollective final : public Communicator::Request {
 public:
  enum class Kind { kAllGather, kReduceScatter, kAllReduce };

  struct Setup {
    Kind kind;
    MPI_Comm comm;
    int tag, rank, size;
    DType dtype;
    const char* src;  // reduce-scatter, all-reduce: every rank's input (the whole buffer)
    char* out;        // all-gather, all-reduce: the whole result; reduce-scatter: this rank's part
    std::vector<size_t> offsets;
    bool accumulate = false;  // reduce-scatter: add the sum into `out`
  };

  P2pCollective(Setup s, ScratchPool& pool, std::vector<P2pCollective*>& active)
      : s_(std::move(s)), esize_(dtype_size(s_.dtype)), pool_(pool), active_(active) {
    if (s_.kind == Kind::kAllGather) {
      phase_ = kGather;
    } else {
      size_t most = 0;
      for (int q = 0; q < s_.size; ++q) most = std::max(most, count(q));
      recv_ = pool_.acquire(most * esize_);
      if (s_.size > 2) send_ = pool_.acquire(most * esize_);
    }
    start_round();
    active_.push_back(this);
  }

  ~P2pCollective() override {
    // As MpiRequest: complete before the buffers go away, unless an exception is unwinding (the
    // peers may never come; MPI_Abort ends the job).
    if (!done_ && mpi_active() && std::uncaught_exceptions() == 0) {
      try {
        advance(true);
      } catch (...) {  // a destructor must not throw; wait() reports errors
      }
    }
    finish();
  }

  void wait() override { advance(true); }

  // Moves the schedule on: completes the current round when its messages have arrived (`block`:
  // waits for them) and starts the next, until the collective is complete or a round is pending.
  void advance(bool block) {
    while (!done_) {
      if (!reqs_.empty()) {
        if (block) {
          CollectiveScope scope("MPI_Waitall (a non-blocking collective's messages)");
          check(MPI_Waitall(static_cast<int>(reqs_.size()), reqs_.data(), MPI_STATUSES_IGNORE),
                "MPI_Waitall");
        } else {
          int flag = 0;
          check(MPI_Testall(static_cast<int>(reqs_.size()), reqs_.data(), &flag, MPI_STATUSES_IGNORE),
                "MPI_Testall");
          if (!flag) return;
        }
        reqs_.clear();
      }
      end_round();
    }
  }

 private:
  static constexpr int kGather = -1;  // phase_ of the all-gather round; ring rounds are 0, 1, ...

  size_t count(int q) const {
    return s_.offsets[static_cast<size_t>(q) + 1] - s_.offsets[static_cast<size_t>(q)];
  }
  size_t bytes_at(int q) const { return s_.offsets[static_cast<size_t>(q)] * esize_; }
  int mod(int q) const { return ((q % s_.size) + s_.size) % s_.size; }

  void post(bool send, const void* buf, int q, int peer) {
    MPI_Request r = MPI_REQUEST_NULL;
    const int n = mpi_count(count(q), send ? "MPI_Isend" : "MPI_Irecv");
    const int tag = s_.tag * 2 + (phase_ == kGather ? 1 : 0);
    if (send)
      check(MPI_Isend(buf, n, mpi_type(s_.dtype), peer, tag, s_.comm, &r), "MPI_Isend");
    else
      check(MPI_Irecv(const_cast<void*>(buf), n, mpi_type(s_.dtype), peer, tag, s_.comm, &r), "MPI_Irecv");
    reqs_.push_back(r);
  }

  void start_round() {
    const int r = s_.rank;
    if (phase_ == kGather) {
      // The all-gather's result starts at out - offsets[r] for an all-reduce (out is part r).
      char* whole = s_.kind == Kind::kAllReduce ? s_.out - bytes_at(r) : s_.out;
      if (s_.kind == Kind::kAllGather && s_.src != whole + bytes_at(r))
        std::memcpy(whole + bytes_at(r), s_.src, count(r) * esize_);
      for (int q = 0; q < s_.size; ++q) {
        if (q == r) continue;
        post(false, whole + bytes_at(q), q, q);
        post(true, whole + bytes_at(r), r, q);
      }
      return;
    }
    const int s = phase_;
    const int out_part = mod(r - s - 1);
    post(false, recv_, mod(r - s - 2), mod(r - 1));
    post(true, s == 0 ? s_.src + bytes_at(out_part) : send_, out_part, mod(r + 1));
  }

  void end_round() {
    const int r = s_.rank;
    if (phase_ == kGather) {
      done_ = true;
      finish();
      return;
    }
    const int q = mod(r - phase_ - 2);  // the part that arrived: add this rank's contribution
    const bool last = phase_ == s_.size - 2;
    add_arrays(s_.dtype, last ? s_.out : send_, recv_, s_.src + bytes_at(q), count(q), last && s_.accumulate);
    if (!last) {
      ++phase_;
    } else if (s_.kind == Kind::kAllReduce) {
      phase_ = kGather;
    } else {
      done_ = true;
      finish();
      return;
    }
    start_round();
  }

  // Returns the scratch and leaves the communicator's list (once).
  void finish() {
    if (recv_) pool_.release(std::exchange(recv_, nullptr));
    if (send_) pool_.release(std::exchange(send_, nullptr));
    std::erase(active_, this);
  }

  Setup s_;
  size_t esize_;
  ScratchPool& pool_;
  std::vector<P2pCollective*>& active_;
  int phase_ = 0;
  bool done_ = false;
  char *recv_ = nullptr, *send_ = nullptr;
  std::vector<MPI_Request> reqs_;
};

class MpiCommunicator final : public Communicator {
 public:
  // Takes ownership of `comm` (freed in the destructor) unless it is MPI_COMM_WORLD.
  explicit MpiCommunicator(MPI_Comm comm) : comm_(comm) {
    check(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    check(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
    check(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
    if (size_ > 1) {
      check(MPI_Comm_dup(comm_, &p2p_), "MPI_Comm_dup");
      check(MPI_Comm_set_errhandler(p2p_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
      int* ub = nullptr;
      int found = 0;
      check(MPI_Comm_get_attr(p2p_, MPI_TAG_UB, &ub, &found), "MPI_Comm_get_attr(MPI_TAG_UB)");
      tag_limit_ = found && ub ? *ub / 2 : 16383;  // P2pCollective uses tags 2t and 2t + 1
    }
  }
  ~MpiCommunicator() override {
    if (!mpi_active()) return;
    if (p2p_ != MPI_COMM_NULL) MPI_Comm_free(&p2p_);
    if (comm_ != MPI_COMM_WORLD) MPI_Comm_free(&comm_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void all_reduce(void* data, size_t count, DType dtype, ReduceOp op) override {
    check_reducible(dtype, "MPI_Allreduce");
    if (size_ == 1 || count == 0) return;
    traffic_.all_reduce += count * dtype_size(dtype);
    CollectiveScope scope("MPI_Allreduce");
    check(MPI_Allreduce(MPI_IN_PLACE, data, mpi_count(count, "MPI_Allreduce"), mpi_type(dtype), mpi_op(op),
                        comm_),
          "MPI_Allreduce");
  }

  void all_reduce_f64(double* data, size_t count, ReduceOp op) override {
    if (size_ == 1 || count == 0) return;
    traffic_.all_reduce += count * sizeof(double);
    CollectiveScope scope("MPI_Allreduce");
    check(MPI_Allreduce(MPI_IN_PLACE, data, mpi_count(count, "MPI_Allreduce"), MPI_DOUBLE, mpi_op(op), comm_),
          "MPI_Allreduce");
  }

  void all_gather(const void* send, void* recv, size_t count, DType dtype) override {
    if (local_copy(send, recv, count, dtype)) return;
    traffic_.all_gather += count * dtype_size(dtype) * static_cast<size_t>(size_);
    const int n = mpi_count(count, "MPI_Allgather");
    CollectiveScope scope("MPI_Allgather");
    check(MPI_Allgather(in_place(send, recv, count, dtype) ? MPI_IN_PLACE : send, n, mpi_type(dtype), recv, n,
                        mpi_type(dtype), comm_),
          "MPI_Allgather");
  }

  void reduce_scatter(const void* send, void* recv, size_t count, DType dtype) override {
    check_reducible(dtype, "MPI_Reduce_scatter_block");
    if (local_copy(send, recv, count, dtype)) return;
    traffic_.reduce_scatter += count * dtype_size(dtype) * static_cast<size_t>(size_);
    CollectiveScope scope("MPI_Reduce_scatter_block");
    check(MPI_Reduce_scatter_block(send, recv, mpi_count(count, "MPI_Reduce_scatter_block"), mpi_type(dtype),
                                   MPI_SUM, comm_),
          "MPI_Reduce_scatter_block");
  }

  void broadcast(void* data, size_t count, DType dtype, int root) override {
    TESSERA_ASSERT(root >= 0 && root < size_);
    if (size_ == 1 || count == 0) return;
    traffic_.broadcast += count * dtype_size(dtype);
    CollectiveScope scope("MPI_Bcast");
    check(MPI_Bcast(data, mpi_count(count, "MPI_Bcast"), mpi_type(dtype), root, comm_), "MPI_Bcast");
  }

  void barrier() override {
    if (size_ <= 1) return;
    CollectiveScope scope("MPI_Barrier");
    check(MPI_Barrier(comm_), "MPI_Barrier");
  }

  std::unique_ptr<Request> all_gather_async(const void* send, void* recv, size_t count,
                                            DType dtype) override {
    if (local_copy(send, recv, count, dtype)) return std::make_unique<MpiRequest>(MPI_REQUEST_NULL, "");
    traffic_.all_gather += count * dtype_size(dtype) * static_cast<size_t>(size_);
    return start(P2pCollective::Kind::kAllGather, dtype, static_cast<const char*>(send),
                 static_cast<char*>(recv), equal_parts(count));
  }

  std::unique_ptr<Request> reduce_scatter_async(const void* send, void* recv, size_t count, DType dtype,
                                                bool accumulate) override {
    check_reducible(dtype, "reduce_scatter_async");
    if (size_ == 1 || count == 0) {
      if (accumulate && count > 0) {
        add_arrays(dtype, recv, recv, send, count);
      } else {
        local_copy(send, recv, count, dtype);
      }
      return std::make_unique<MpiRequest>(MPI_REQUEST_NULL, "");
    }
    traffic_.reduce_scatter += count * dtype_size(dtype) * static_cast<size_t>(size_);
    return start(P2pCollective::Kind::kReduceScatter, dtype, static_cast<const char*>(send),
                 static_cast<char*>(recv), equal_parts(count), accumulate);
  }

  std::unique_ptr<Request> all_reduce_async(void* data, size_t count, DType dtype) override {
    check_reducible(dtype, "all_reduce_async");
    if (size_ == 1 || count == 0) return std::make_unique<MpiRequest>(MPI_REQUEST_NULL, "");
    traffic_.all_reduce += count * dtype_size(dtype);
    std::vector<size_t> offsets(static_cast<size_t>(size_) + 1);
    for (size_t q = 0; q <= static_cast<size_t>(size_); ++q)
      offsets[q] = count * q / static_cast<size_t>(size_);
    char* whole = static_cast<char*>(data);
    char* mine = whole + offsets[static_cast<size_t>(rank_)] * dtype_size(dtype);
    return start(P2pCollective::Kind::kAllReduce, dtype, whole, mine, std::move(offsets));
  }

  // MPI_Ialltoallv over byte counts (bf16 rows and f32 rows alike; MPI's counts are ints, so a
  // part of more than INT_MAX bytes is refused by mpi_count).
  std::unique_ptr<Request> all_to_all_async(const void* send, void* recv, const AllToAllLayout& l,
                                            DType dtype) override {
    if (size_ == 1) return Communicator::all_to_all_async(send, recv, l, dtype);
    const size_t es = dtype_size(dtype);
    auto r = std::make_unique<AllToAllRequest>(static_cast<size_t>(size_));
    const size_t* from[4] = {l.send_counts, l.send_offsets, l.recv_counts, l.recv_offsets};
    for (int w = 0; w < 4; ++w)
      for (int q = 0; q < size_; ++q) r->counts(w)[q] = mpi_count(from[w][q] * es, "MPI_Ialltoallv");
    const size_t* counted = l.count_received ? l.recv_counts : l.send_counts;
    for (int q = 0; q < size_; ++q) {
      traffic_.all_to_all += counted[q] * es;
      if (q != rank_) traffic_.all_to_all_remote += counted[q] * es;
    }
    check(MPI_Ialltoallv(send, r->counts(0), r->counts(1), MPI_BYTE, recv, r->counts(2), r->counts(3),
                         MPI_BYTE, comm_, r->request()),
          "MPI_Ialltoallv");
    return r;
  }

  // Moves every schedule in flight on (their rounds start only inside these calls and wait()); the
  // probe also runs MPI's progress engine for anything else (OpenMPI has no progress thread for
  // shared memory or TCP).
  void progress() override {
    if (size_ == 1) return;
    if (active_.empty()) {
      int flag = 0;
      check(MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, comm_, &flag, MPI_STATUS_IGNORE), "MPI_Iprobe");
      return;
    }
    // advance() may finish a collective, which then leaves active_ (only it): walking from the
    // back visits every one without copying the list on this per-node path.
    for (size_t i = active_.size(); i-- > 0;) active_[i]->advance(false);
  }

  size_t scratch_bytes() const override { return scratch_.bytes(); }

  std::unique_ptr<Communicator> split(int color, int key) override {
    MPI_Comm out = MPI_COMM_NULL;
    check(MPI_Comm_split(comm_, color, key, &out), "MPI_Comm_split");
    return std::make_unique<MpiCommunicator>(out);
  }

 private:
  // A group of one copies; returns true when it did (no MPI call needed).
  bool local_copy(const void* send, void* recv, size_t count, DType dtype) const {
    if (size_ != 1 && count != 0) return false;
    if (send != recv && count > 0) std::memmove(recv, send, count * dtype_size(dtype));
    return true;
  }
  // all_gather's `send` already in its place in `recv` (MPI forbids aliased send and receive
  // buffers unless MPI_IN_PLACE says so).
  bool in_place(const void* send, const void* recv, size_t count, DType dtype) const {
    return static_cast<const char*>(send) ==
           static_cast<const char*>(recv) + static_cast<size_t>(rank_) * count * dtype_size(dtype);
  }

  std::vector<size_t> equal_parts(size_t count) const {
    std::vector<size_t> offsets(static_cast<size_t>(size_) + 1);
    for (size_t q = 0; q < offsets.size(); ++q) offsets[q] = q * count;
    return offsets;
  }
  std::unique_ptr<Request> start(P2pCollective::Kind kind, DType dtype, const char* src, char* out,
                                 std::vector<size_t> offsets, bool accumulate = false) {
    const int tag = static_cast<int>(sequence_++ % static_cast<uint64_t>(tag_limit_));
    return std::make_unique<P2pCollective>(
        P2pCollective::Setup{kind, p2p_, tag, rank_, size_, dtype, src, out, std::move(offsets), accumulate},
        scratch_, active_);
  }

  MPI_Comm comm_;
  MPI_Comm p2p_ = MPI_COMM_NULL;  // the non-blocking collectives' messages
  int rank_ = 0, size_ = 1;
  int tag_limit_ = 1;
  uint64_t sequence_ = 0;  // non-blocking collectives started: every rank counts the same
  ScratchPool scratch_;
  std::vector<P2pCollective*> active_;
};

const char* const kLauncherVariables[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE", "SLURM_PROCID"};

}  // namespace

bool launched_by_mpi() {
  for (const char* v : kLauncherVariables)
    if (const char* s = std::getenv(v); s && *s) return true;
  return false;
}

bool mpi_active() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized && !finalized;
}

std::unique_ptr<Communicator> make_mpi_world_communicator() {
  int initialized = 0;
  check(MPI_Initialized(&initialized), "MPI_Initialized");
  if (!initialized) {
    int provided = 0;
    check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
    std::atexit(finalize_at_exit);
    if (provided < MPI_THREAD_FUNNELED)
      fail(ErrorKind::kRuntime,
           "MPI_Init_thread: the MPI library provides thread level {}, Tessera needs "
           "MPI_THREAD_FUNNELED ({})",
           provided, MPI_THREAD_FUNNELED);
  }
  return std::make_unique<MpiCommunicator>(MPI_COMM_WORLD);
}

std::unique_ptr<Communicator> make_world_communicator() {
  return launched_by_mpi() ? make_mpi_world_communicator() : make_single_process_communicator();
}

void abort_job(int code) {
  if (mpi_active()) MPI_Abort(MPI_COMM_WORLD, code);
}

std::pair<int, int> mpi_world_rank_size() {
  int rank = 0, size = 1;
  if (mpi_active() && (MPI_Comm_rank(MPI_COMM_WORLD, &rank) != MPI_SUCCESS ||
                       MPI_Comm_size(MPI_COMM_WORLD, &size) != MPI_SUCCESS))
    return {0, 1};
  return {rank, size};
}

std::string host_name() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) fail(ErrorKind::kRuntime, "gethostname failed");
  return buf;
}

}  // namespace tessera::dist
