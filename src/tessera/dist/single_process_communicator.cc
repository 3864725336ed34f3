// The group of one: what a run without a launcher (or a mesh axis of size 1) talks to. Every
// collective is the identity on one rank: reductions leave the data as it is, gathers and
// scatters copy `count` elements, and nothing is counted as traffic (no byte leaves the process).
#include <cstring>

#include "tessera/core/error.h"
#include "tessera/dist/communicator.h"

namespace tessera::dist {

namespace {

class DoneRequest final : public Communicator::Request {
 public:
  void wait() override {}
};

class SingleProcessCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }

  void all_reduce(void*, size_t, DType, ReduceOp) override {}
  void all_reduce_f64(double*, size_t, ReduceOp) override {}
  void all_gather(const void* send, void* recv, size_t count, DType dtype) override {
    copy(send, recv, count, dtype);
  }
  void reduce_scatter(const void* send, void* recv, size_t count, DType dtype) override {
    copy(send, recv, count, dtype);
  }
  void broadcast(void*, size_t, DType, int root) override { TESSERA_ASSERT(root == 0); }
  void barrier() override {}

  std::unique_ptr<Request> all_gather_async(const void* send, void* recv, size_t count,
                                            DType dtype) override {
    all_gather(send, recv, count, dtype);
    return std::make_unique<DoneRequest>();
  }
  std::unique_ptr<Request> reduce_scatter_async(const void* send, void* recv, size_t count, DType dtype,
                                                bool accumulate) override {
    if (!accumulate) {
      reduce_scatter(send, recv, count, dtype);
    } else {
      TESSERA_CHECK(dtype == DType::kF32, ErrorKind::kInternal, "reduce_scatter_async: accumulates f32 only");
      float* d = static_cast<float*>(recv);
      const float* s = static_cast<const float*>(send);
      for (size_t i = 0; i < count; ++i) d[i] += s[i];
    }
    return std::make_unique<DoneRequest>();
  }
  std::unique_ptr<Request> all_reduce_async(void*, size_t, DType) override {
    return std::make_unique<DoneRequest>();
  }

  std::unique_ptr<Communicator> split(int, int) override { return make_single_process_communicator(); }

 private:
  static void copy(const void* send, void* recv, size_t count, DType dtype) {
    if (send != recv && count > 0) std::memmove(recv, send, count * dtype_size(dtype));
  }
};

}  // namespace

std::unique_ptr<Communicator::Request> Communicator::all_to_all_async(const void* send, void* recv,
                                                                      const AllToAllLayout& layout,
                                                                      DType dtype) {
  TESSERA_CHECK(size() == 1, ErrorKind::kInternal, "all_to_all_async: this communicator of {} ranks has none",
                size());
  const size_t bytes = layout.send_counts[0] * dtype_size(dtype);
  TESSERA_ASSERT(layout.recv_counts[0] == layout.send_counts[0]);
  if (bytes > 0)
    std::memmove(static_cast<char*>(recv) + layout.recv_offsets[0] * dtype_size(dtype),
                 static_cast<const char*>(send) + layout.send_offsets[0] * dtype_size(dtype), bytes);
  return std::make_unique<DoneRequest>();
}

std::unique_ptr<Communicator> make_single_process_communicator() {
  return std::make_unique<SingleProcessCommunicator>();
}

}  // namespace tessera::dist
