// The Communicator over an MPI communicator, and MPI's start and end (mpi_communicator.h).
//
// Each collective maps to one MPI call: all_reduce -> MPI_Allreduce (in place), all_gather ->
// MPI_Allgather (MPI_IN_PLACE when `send` already sits at this rank's place in `recv`),
// reduce_scatter -> MPI_Reduce_scatter_block, broadcast -> MPI_Bcast, and the non-blocking forms
// -> MPI_Iallgather / MPI_Ireduce_scatter_block / MPI_Iallreduce (MPI-3). Every call goes through
// check(), which turns a return code other than MPI_SUCCESS into Error(kRuntime) naming the call.
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

// The C API only: OpenMPI's and MPICH's mpi.h pull in the deprecated C++ bindings (which need
// libmpi_cxx) when compiled as C++ unless told not to.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <cstring>
#include <exception>

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
    check(MPI_Wait(&req_, MPI_STATUS_IGNORE), call_);
  }

 private:
  MPI_Request req_;
  const char* call_;
};

class MpiCommunicator final : public Communicator {
 public:
  // Takes ownership of `comm` (freed in the destructor) unless it is MPI_COMM_WORLD.
  explicit MpiCommunicator(MPI_Comm comm) : comm_(comm) {
    check(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    check(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
    check(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
  }
  ~MpiCommunicator() override {
    if (comm_ != MPI_COMM_WORLD && mpi_active()) MPI_Comm_free(&comm_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void all_reduce(void* data, size_t count, DType dtype, ReduceOp op) override {
    check_reducible(dtype, "MPI_Allreduce");
    if (size_ == 1 || count == 0) return;
    traffic_.all_reduce += count * dtype_size(dtype);
    check(MPI_Allreduce(MPI_IN_PLACE, data, mpi_count(count, "MPI_Allreduce"), mpi_type(dtype), mpi_op(op),
                        comm_),
          "MPI_Allreduce");
  }

  void all_reduce_f64(double* data, size_t count, ReduceOp op) override {
    if (size_ == 1 || count == 0) return;
    traffic_.all_reduce += count * sizeof(double);
    check(MPI_Allreduce(MPI_IN_PLACE, data, mpi_count(count, "MPI_Allreduce"), MPI_DOUBLE, mpi_op(op), comm_),
          "MPI_Allreduce");
  }

  void all_gather(const void* send, void* recv, size_t count, DType dtype) override {
    if (local_copy(send, recv, count, dtype)) return;
    traffic_.all_gather += count * dtype_size(dtype) * static_cast<size_t>(size_);
    const int n = mpi_count(count, "MPI_Allgather");
    check(MPI_Allgather(in_place(send, recv, count, dtype) ? MPI_IN_PLACE : send, n, mpi_type(dtype), recv, n,
                        mpi_type(dtype), comm_),
          "MPI_Allgather");
  }

  void reduce_scatter(const void* send, void* recv, size_t count, DType dtype) override {
    check_reducible(dtype, "MPI_Reduce_scatter_block");
    if (local_copy(send, recv, count, dtype)) return;
    traffic_.reduce_scatter += count * dtype_size(dtype) * static_cast<size_t>(size_);
    check(MPI_Reduce_scatter_block(send, recv, mpi_count(count, "MPI_Reduce_scatter_block"), mpi_type(dtype),
                                   MPI_SUM, comm_),
          "MPI_Reduce_scatter_block");
  }

  void broadcast(void* data, size_t count, DType dtype, int root) override {
    TESSERA_ASSERT(root >= 0 && root < size_);
    if (size_ == 1 || count == 0) return;
    traffic_.broadcast += count * dtype_size(dtype);
    check(MPI_Bcast(data, mpi_count(count, "MPI_Bcast"), mpi_type(dtype), root, comm_), "MPI_Bcast");
  }

  void barrier() override {
    if (size_ > 1) check(MPI_Barrier(comm_), "MPI_Barrier");
  }

  std::unique_ptr<Request> all_gather_async(const void* send, void* recv, size_t count,
                                            DType dtype) override {
    if (local_copy(send, recv, count, dtype)) return std::make_unique<MpiRequest>(MPI_REQUEST_NULL, "");
    traffic_.all_gather += count * dtype_size(dtype) * static_cast<size_t>(size_);
    const int n = mpi_count(count, "MPI_Iallgather");
    MPI_Request r = MPI_REQUEST_NULL;
    check(MPI_Iallgather(in_place(send, recv, count, dtype) ? MPI_IN_PLACE : send, n, mpi_type(dtype), recv,
                         n, mpi_type(dtype), comm_, &r),
          "MPI_Iallgather");
    return std::make_unique<MpiRequest>(r, "MPI_Iallgather (wait)");
  }

  std::unique_ptr<Request> reduce_scatter_async(const void* send, void* recv, size_t count,
                                                DType dtype) override {
    check_reducible(dtype, "MPI_Ireduce_scatter_block");
    if (local_copy(send, recv, count, dtype)) return std::make_unique<MpiRequest>(MPI_REQUEST_NULL, "");
    traffic_.reduce_scatter += count * dtype_size(dtype) * static_cast<size_t>(size_);
    MPI_Request r = MPI_REQUEST_NULL;
    check(MPI_Ireduce_scatter_block(send, recv, mpi_count(count, "MPI_Ireduce_scatter_block"),
                                    mpi_type(dtype), MPI_SUM, comm_, &r),
          "MPI_Ireduce_scatter_block");
    return std::make_unique<MpiRequest>(r, "MPI_Ireduce_scatter_block (wait)");
  }

  std::unique_ptr<Request> all_reduce_async(void* data, size_t count, DType dtype) override {
    check_reducible(dtype, "MPI_Iallreduce");
    MPI_Request r = MPI_REQUEST_NULL;
    if (size_ > 1 && count > 0) {
      traffic_.all_reduce += count * dtype_size(dtype);
      check(MPI_Iallreduce(MPI_IN_PLACE, data, mpi_count(count, "MPI_Iallreduce"), mpi_type(dtype), MPI_SUM,
                           comm_, &r),
            "MPI_Iallreduce");
    }
    return std::make_unique<MpiRequest>(r, "MPI_Iallreduce (wait)");
  }

  // OpenMPI moves non-blocking collectives forward only inside MPI calls (no progress thread in
  // the TCP transport); a probe runs its progress engine without side effects.
  void progress() override {
    if (size_ == 1) return;
    int flag = 0;
    check(MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, comm_, &flag, MPI_STATUS_IGNORE), "MPI_Iprobe");
  }

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

  MPI_Comm comm_;
  int rank_ = 0, size_ = 1;
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
