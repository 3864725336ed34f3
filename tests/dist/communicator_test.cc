// The communicators and the mesh: the one-process communicator's identities; the MPI
// communicator's collectives on 2 and 4 ranks against values every rank can compute alone (this
// test program run again under mpirun, as the disabled MpiWorker tests); mesh coordinates and
// groups for a one-process world; count_devices; the launcher detection.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdint>
#include <numeric>
#include <vector>

#include "dist_test_util.h"
#include "tessera/config/config.h"
#include "tessera/core/error.h"
#include "tessera/core/source_dir.h"
#include "tessera/dist/mesh.h"
#include "tessera/dist/mpi_communicator.h"

namespace tessera {
namespace {

using dist::Communicator;

TEST(SingleProcessCommunicator, CollectivesAreIdentities) {
  auto c = dist::make_single_process_communicator();
  EXPECT_EQ(c->rank(), 0);
  EXPECT_EQ(c->size(), 1);
  std::vector<float> a = {1, 2, 3};
  c->all_reduce(a.data(), a.size(), DType::kF32);
  EXPECT_EQ(a, (std::vector<float>{1, 2, 3}));
  std::vector<float> g(3);
  c->all_gather(a.data(), g.data(), 3, DType::kF32);
  EXPECT_EQ(g, a);
  std::vector<float> rs(3);
  c->reduce_scatter(a.data(), rs.data(), 3, DType::kF32);
  EXPECT_EQ(rs, a);
  auto req = c->all_gather_async(a.data(), g.data(), 3, DType::kF32);
  req->wait();
  req->wait();  // idempotent
  c->reduce_scatter_async(a.data(), rs.data(), 3, DType::kF32, /*accumulate=*/true)->wait();
  EXPECT_EQ(rs, (std::vector<float>{2, 4, 6}));
  double d[2] = {1.5, 2.5};
  c->all_reduce_f64(d, 2);
  EXPECT_EQ(d[1], 2.5);
  auto sub = c->split(7, 0);
  EXPECT_EQ(sub->size(), 1);
  EXPECT_EQ(c->traffic().total(), 0u);
}

Config config_for(std::vector<std::string> o, DeviceCount dev = {}) {
  return load_config(tessera::source_dir().string() + "/configs/base.yml", o, dev);
}

TEST(Mesh, OneDeviceHasSizeOneEverywhere) {
  auto mesh =
      dist::make_mesh(config_for({"model_name=llama-test"}), dist::make_single_process_communicator());
  for (int a = 0; a < kNumMeshAxes; ++a) {
    EXPECT_EQ(mesh->size(static_cast<MeshAxis>(a)), 1);
    EXPECT_EQ(mesh->coord(static_cast<MeshAxis>(a)), 0);
  }
  EXPECT_EQ(mesh->axes({MeshAxis::kData, MeshAxis::kFsdp}).size(), 1);
  EXPECT_EQ(mesh->axis(MeshAxis::kTensor).size(), 1);
  EXPECT_EQ(mesh->position(), 0);
  EXPECT_NE(mesh->describe().find("data 1 x fsdp 1 x tensor 1"), std::string::npos) << mesh->describe();
}

TEST(Mesh, WorldOfAnotherSizeIsAConfigError) {
  Config cfg = config_for({"model_name=llama-test", "ici_fsdp_parallelism=2"}, {.num_devices = 2});
  try {
    dist::make_mesh(cfg, dist::make_single_process_communicator());
    FAIL() << "expected kConfig";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    EXPECT_NE(std::string(e.what()).find("2 device(s) but the job has 1 rank"), std::string::npos)
        << e.what();
  }
}

TEST(Mesh, CountDevicesOfOneProcess) {
  auto c = dist::make_single_process_communicator();
  DeviceCount d = dist::count_devices(*c);
  EXPECT_EQ(d.num_devices, 1);
  EXPECT_EQ(d.num_slices, 1);
}

TEST(MpiLauncher, DetectedFromTheEnvironment) {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE", "SLURM_PROCID"}) unsetenv(v);
  EXPECT_FALSE(dist::launched_by_mpi());
  auto w = dist::make_world_communicator();  // no launcher: one process, MPI untouched
  EXPECT_EQ(w->size(), 1);
  EXPECT_FALSE(dist::mpi_active());
  setenv("SLURM_PROCID", "0", 1);
  EXPECT_TRUE(dist::launched_by_mpi());
  unsetenv("SLURM_PROCID");
}

// ---- run under mpirun by MpiCommunicator.* below ----

// Every collective against what each rank can compute alone: rank r contributes r + 1 + i/8.
TEST(MpiWorker, DISABLED_Collectives) {
  ASSERT_TRUE(dist::launched_by_mpi()) << "run under mpirun";
  auto w = dist::make_world_communicator();
  const int n = w->size(), r = w->rank();
  const size_t count = 37;  // an odd count per rank
  auto value = [](int rank, size_t i) { return static_cast<float>(rank + 1) + static_cast<float>(i) / 8; };
  std::vector<float> a(count);
  for (size_t i = 0; i < count; ++i) a[i] = value(r, i);
  w->all_reduce(a.data(), count, DType::kF32);
  for (size_t i = 0; i < count; ++i) {
    float want = 0;
    for (int q = 0; q < n; ++q) want += value(q, i);
    ASSERT_EQ(a[i], want) << i;  // small integers and eighths: exact in float
  }
  std::vector<float> mine(count), all(count * static_cast<size_t>(n));
  for (size_t i = 0; i < count; ++i) mine[i] = value(r, i);
  w->all_gather(mine.data(), all.data(), count, DType::kF32);
  for (int q = 0; q < n; ++q)
    for (size_t i = 0; i < count; ++i) ASSERT_EQ(all[static_cast<size_t>(q) * count + i], value(q, i));
  // In place: this rank's part already sits at its place.
  std::vector<float> inplace(count * static_cast<size_t>(n), -1);
  std::copy(mine.begin(), mine.end(),
            inplace.begin() + static_cast<ptrdiff_t>(static_cast<size_t>(r) * count));
  w->all_gather_async(inplace.data() + static_cast<size_t>(r) * count, inplace.data(), count, DType::kF32)
      ->wait();
  EXPECT_EQ(inplace, all);
  // reduce_scatter: send[q*count + i] = value(r, q*count + i); rank r receives the sum of part r.
  std::vector<float> send(count * static_cast<size_t>(n)), part(count);
  for (size_t i = 0; i < send.size(); ++i) send[i] = value(r, i);
  auto req = w->reduce_scatter_async(send.data(), part.data(), count, DType::kF32);
  w->progress();
  req->wait();
  for (size_t i = 0; i < count; ++i) {
    float want = 0;
    for (int q = 0; q < n; ++q) want += value(q, static_cast<size_t>(r) * count + i);
    ASSERT_EQ(part[i], want);
  }
  // Accumulating: the sum is added to what `recv` holds (here: the sum itself, so twice it).
  const std::vector<float> once = part;
  w->reduce_scatter_async(send.data(), part.data(), count, DType::kF32, /*accumulate=*/true)->wait();
  for (size_t i = 0; i < count; ++i) ASSERT_EQ(part[i], 2 * once[i]);
  double d = r + 0.25;
  w->all_reduce_f64(&d, 1, dist::ReduceOp::kMax);
  EXPECT_EQ(d, n - 1 + 0.25);
  std::vector<int32_t> b = {r == 1 ? 42 : 0};
  w->broadcast(b.data(), 1, DType::kI32, 1);
  EXPECT_EQ(b[0], 42);
  std::vector<float> ar(5, static_cast<float>(r));
  w->all_reduce_async(ar.data(), ar.size(), DType::kF32)->wait();
  EXPECT_EQ(ar[4], static_cast<float>(n * (n - 1) / 2));
  // Fewer elements than ranks: some parts of the all-reduce's ring are empty.
  std::vector<float> few(3, static_cast<float>(r + 1));
  w->all_reduce_async(few.data(), few.size(), DType::kF32)->wait();
  EXPECT_EQ(few, std::vector<float>(3, static_cast<float>(n * (n + 1) / 2)));
  // Traffic: bytes of the buffers passed in (see communicator.h).
  EXPECT_EQ(w->traffic().all_gather, 2 * count * n * sizeof(float));
  EXPECT_EQ(w->traffic().reduce_scatter, 2 * count * n * sizeof(float));
  // Split into even and odd ranks, ordered by descending rank.
  auto sub = w->split(r % 2, -r);
  EXPECT_EQ(sub->size(), (n - r % 2 + 1) / 2);
  int32_t top = r;
  sub->all_reduce(&top, 1, DType::kI32, dist::ReduceOp::kMax);
  EXPECT_EQ(sub->rank(), (top - r) / 2);
  w->barrier();
}

// Many non-blocking collectives in flight at once, each rank advancing them at different moments
// and waiting for them in another order than it started them: every one still meets its own
// messages (the schedules are told apart by their start order, which all ranks share).
TEST(MpiWorker, DISABLED_ManyInFlight) {
  ASSERT_TRUE(dist::launched_by_mpi());
  auto w = dist::make_world_communicator();
  const int n = w->size(), r = w->rank();
  constexpr int kEach = 6;
  const size_t count = 1000 + 17 * static_cast<size_t>(n);  // parts of unequal length in the all-reduce
  std::vector<std::vector<float>> rs_in(kEach), rs_out(kEach), ag_out(kEach), ar(kEach);
  std::vector<std::vector<int64_t>> ar_i64(kEach);
  std::vector<float> ag_in(count);
  std::vector<std::unique_ptr<dist::Communicator::Request>> reqs;
  for (size_t i = 0; i < count; ++i) ag_in[i] = static_cast<float>(r * 10000 + static_cast<int>(i));
  for (int k = 0; k < kEach; ++k) {
    rs_in[k].resize(count * static_cast<size_t>(n));
    for (size_t i = 0; i < rs_in[k].size(); ++i) rs_in[k][i] = static_cast<float>((k + 1) * (r + 1)) + i % 7;
    rs_out[k].assign(count, -1);
    ag_out[k].assign(count * static_cast<size_t>(n), -1);
    ar[k].assign(count, static_cast<float>(r + k));
    ar_i64[k].assign(5, int64_t{1} << 40);
    reqs.push_back(w->reduce_scatter_async(rs_in[k].data(), rs_out[k].data(), count, DType::kF32));
    if (r % 2 == 0) w->progress();
    reqs.push_back(w->all_gather_async(ag_in.data(), ag_out[k].data(), count, DType::kF32));
    reqs.push_back(w->all_reduce_async(ar[k].data(), count, DType::kF32));
    reqs.push_back(w->all_reduce_async(ar_i64[k].data(), 5, DType::kI64));
    if (r % 2 == 1)
      for (int j = 0; j < 3; ++j) w->progress();
  }
  for (auto it = reqs.rbegin(); it != reqs.rend(); ++it) (*it)->wait();
  for (int k = 0; k < kEach; ++k) {
    for (size_t i = 0; i < count; ++i) {
      const size_t at = static_cast<size_t>(r) * count + i;
      ASSERT_EQ(rs_out[k][i], static_cast<float>((k + 1) * n * (n + 1) / 2 + n * static_cast<int>(at % 7)))
          << k;
      ASSERT_EQ(ar[k][i], static_cast<float>(n * (n - 1) / 2 + n * k)) << k;
    }
    for (int q = 0; q < n; ++q)
      for (size_t i = 0; i < count; i += 97)
        ASSERT_EQ(ag_out[k][static_cast<size_t>(q) * count + i],
                  static_cast<float>(q * 10000 + static_cast<int>(i)));
    EXPECT_EQ(ar_i64[k], std::vector<int64_t>(5, static_cast<int64_t>(n) << 40));
  }
}

// The mesh of 4 ranks as data 2 x fsdp 2 (one host): coordinates follow the rank (fsdp fastest),
// and each group holds the ranks that differ only along its axes.
TEST(MpiWorker, DISABLED_MeshOfFour) {
  ASSERT_TRUE(dist::launched_by_mpi());
  auto w = dist::make_world_communicator();
  ASSERT_EQ(w->size(), 4);
  const int r = w->rank();
  DeviceCount dev = dist::count_devices(*w);
  EXPECT_EQ(dev.num_devices, 4);
  EXPECT_EQ(dev.num_slices, 1);
  Config cfg = config_for({"model_name=llama-test", "ici_data_parallelism=2", "ici_fsdp_parallelism=2"}, dev);
  auto mesh = dist::make_mesh(cfg, std::move(w));
  EXPECT_EQ(mesh->coord(MeshAxis::kData), r / 2);
  EXPECT_EQ(mesh->coord(MeshAxis::kFsdp), r % 2);
  EXPECT_EQ(mesh->position(), r);
  EXPECT_EQ(mesh->axis(MeshAxis::kFsdp).rank(), r % 2);
  EXPECT_EQ(mesh->axis(MeshAxis::kData).rank(), r / 2);
  EXPECT_EQ(mesh->axes({MeshAxis::kData, MeshAxis::kFsdp}).rank(), r);
  EXPECT_EQ(mesh->axes({MeshAxis::kFsdp, MeshAxis::kData}).rank(), (r % 2) * 2 + r / 2);
  EXPECT_EQ(mesh->axis(MeshAxis::kTensor).size(), 1);
  int32_t sum = r;
  mesh->axis(MeshAxis::kFsdp).all_reduce(&sum, 1, DType::kI32);
  EXPECT_EQ(sum, (r / 2) * 4 + 1);  // ranks 2k and 2k+1
}

void run_worker(int np, const std::string& test) {
  if (!testing::have_mpirun()) GTEST_SKIP() << "mpirun is not installed (Debian: openmpi-bin)";
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  testing::CommandResult r = testing::run_command(testing::mpirun(np) + " " + testing::shell_quote(self) +
                                                      " --gtest_filter=MpiWorker." + test +
                                                      " --gtest_also_run_disabled_tests --gtest_color=no",
                                                  60);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("[  PASSED  ] 1 test"), std::string::npos) << r.output;
}

TEST(MpiCommunicator, CollectivesOnTwoRanks) {
  run_worker(2, "DISABLED_Collectives");
}
TEST(MpiCommunicator, CollectivesOnFourRanks) {
  run_worker(4, "DISABLED_Collectives");
}
TEST(MpiCommunicator, ManyInFlightOnTwoRanks) {
  run_worker(2, "DISABLED_ManyInFlight");
}
TEST(MpiCommunicator, ManyInFlightOnFourRanks) {
  run_worker(4, "DISABLED_ManyInFlight");
}
TEST(MpiCommunicator, MeshOfFourRanks) {
  run_worker(4, "DISABLED_MeshOfFour");
}

}  // namespace
}  // namespace tessera
