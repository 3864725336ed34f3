// make_mesh and count_devices (mesh.h).
//
// Placement follows MaxText's hybrid mesh: a rank's position p = slice * per_slice + local, where
// the slice is its host's index (hosts in the order of their lowest world rank) and `local` its
// index among the ranks of that host. `local` is split into ici coordinates and the slice into dcn
// coordinates, both in MeshAxis order with the last axis fastest-varying; an axis's coordinate is
// dcn_coord * ici_size + ici_coord, so ranks that differ along an ici axis share a host.
//
// An axis group is world.split(color, key): the color numbers the coordinates on the other axes,
// the key the coordinates on the group's axes (first listed slowest), so groups do not depend on
// the launcher's rank order. Axes of size 1 get the single-process communicator, without MPI.
#include "tessera/dist/mesh.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/dist/mpi_communicator.h"

namespace tessera::dist {

namespace {

// Every rank's host name, in world rank order.
std::vector<std::string> gather_host_names(Communicator& world) {
  return all_gather_strings(world, host_name());
}

struct HostLayout {
  std::vector<std::string> hosts;  // in order of first appearance
  std::vector<int64_t> slice;      // per world rank
  std::vector<int64_t> local;      // per world rank: index among its host's ranks
};

HostLayout host_layout(const std::vector<std::string>& names) {
  HostLayout l;
  std::map<std::string, int64_t> index, count;
  for (const std::string& n : names) {
    if (!index.count(n)) {
      index[n] = static_cast<int64_t>(l.hosts.size());
      l.hosts.push_back(n);
    }
    l.slice.push_back(index[n]);
    l.local.push_back(count[n]++);
  }
  for (const auto& [host, c] : count)
    if (c != count.begin()->second)
      fail(ErrorKind::kConfig,
           "the job runs {} rank(s) on host {} but {} on host {}: a mesh needs the same number of ranks on "
           "every host (mpirun -np N with N a multiple of the hosts, or --map-by ppr:K:node)",
           c, host, count.begin()->second, count.begin()->first);
  return l;
}

class MeshImpl final : public Mesh {
 public:
  MeshImpl(const Config& cfg, std::unique_ptr<Communicator> world) : world_(std::move(world)) {
    const int64_t n = world_->size();
    if (n != cfg.num_devices)
      fail(ErrorKind::kConfig, "the config was resolved for {} device(s) but the job has {} rank(s)",
           cfg.num_devices, n);
    ici_ = cfg.ici_parallelism;
    dcn_ = cfg.dcn_parallelism;
    const std::vector<std::string> names = gather_host_names(*world_);
    host_ = names[static_cast<size_t>(world_->rank())];
    const HostLayout l = host_layout(names);
    num_hosts_ = static_cast<int64_t>(l.hosts.size());
    const int64_t per_slice = n / cfg.num_slices;
    const auto r = static_cast<size_t>(world_->rank());
    int64_t slice = 0, local = world_->rank();
    if (cfg.num_slices > 1) {
      if (num_hosts_ != cfg.num_slices)
        fail(ErrorKind::kConfig,
             "the config was resolved for {} slice(s) (hosts) but the job runs on {} host(s)", cfg.num_slices,
             num_hosts_);
      slice = l.slice[r];
      local = l.local[r];
    }
    position_ = slice * per_slice + local;
    // Mixed-radix digits, last axis fastest.
    int64_t rest_local = local, rest_slice = slice;
    for (int a = kNumMeshAxes - 1; a >= 0; --a) {
      const int64_t ici_c = rest_local % ici_[a], dcn_c = rest_slice % dcn_[a];
      rest_local /= ici_[a];
      rest_slice /= dcn_[a];
      coord_[a] = dcn_c * ici_[a] + ici_c;
    }
    for (int a = 0; a < kNumMeshAxes; ++a) axis_[a] = make_group({static_cast<MeshAxis>(a)});
    groups_[key({MeshAxis::kData, MeshAxis::kFsdp})] = make_group({MeshAxis::kData, MeshAxis::kFsdp});
    // Expert parallelism's groups (batch_group below, and the data x expert reductions of
    // graph/param_sync.cc), made here so that every rank makes them in the same order.
    for (const std::vector<MeshAxis>& v :
         {std::vector<MeshAxis>{MeshAxis::kData, MeshAxis::kFsdp, MeshAxis::kExpert},
          std::vector<MeshAxis>{MeshAxis::kData, MeshAxis::kExpert}})
      groups_[key(v)] = make_group(v);
  }

  int64_t size(MeshAxis axis) const override { return ici_[idx(axis)] * dcn_[idx(axis)]; }
  int64_t coord(MeshAxis axis) const override { return coord_[idx(axis)]; }
  Communicator& world() override { return *world_; }
  Communicator& axis(MeshAxis axis) override { return *axis_[idx(axis)]; }
  Communicator& axes(std::initializer_list<MeshAxis> list) override {
    const std::vector<MeshAxis> v(list);
    if (v.size() == 1) return axis(v[0]);
    auto& slot = groups_[key(v)];
    if (!slot) slot = make_group(v);
    return *slot;
  }
  int64_t position() const override { return position_; }
  int64_t num_devices() const override { return world_->size(); }
  TrafficCounters traffic() const override {
    TrafficCounters t;
    auto add = [&](const Communicator& c) {
      t.all_reduce += c.traffic().all_reduce;
      t.all_gather += c.traffic().all_gather;
      t.reduce_scatter += c.traffic().reduce_scatter;
      t.broadcast += c.traffic().broadcast;
      t.all_to_all += c.traffic().all_to_all;
      t.all_to_all_remote += c.traffic().all_to_all_remote;
    };
    add(*world_);
    for (const auto& c : axis_) add(*c);
    for (const auto& [k, c] : groups_) add(*c);
    return t;
  }

  size_t scratch_bytes() const override {
    size_t n = world_->scratch_bytes();
    for (const auto& c : axis_) n += c->scratch_bytes();
    for (const auto& [k, c] : groups_) n += c->scratch_bytes();
    return n;
  }

  std::string describe() const override {
    std::vector<std::string> sizes, coords, split;
    for (int a = 0; a < kNumMeshAxes; ++a) {
      const int64_t s = ici_[a] * dcn_[a];
      const auto name = kMeshAxes[a].axis;
      if (s > 1 || a == idx(MeshAxis::kData) || a == idx(MeshAxis::kFsdp) || a == idx(MeshAxis::kTensor)) {
        sizes.push_back(fmt::format("{} {}", name, s));
        coords.push_back(fmt::format("{} {}", name, coord_[a]));
      }
      if (dcn_[a] > 1)
        split.push_back(fmt::format("{} {} = {} per host x {} hosts", name, s, ici_[a], dcn_[a]));
    }
    return fmt::format("mesh: {} ({} rank(s) on {} host(s){}{}); rank {} at position {}: {}; host {}",
                       fmt::join(sizes, " x "), world_->size(), num_hosts_, split.empty() ? "" : "; ",
                       fmt::join(split, ", "), world_->rank(), position_, fmt::join(coords, ", "), host_);
  }

 private:
  static int idx(MeshAxis a) { return static_cast<int>(a); }
  static int key(const std::vector<MeshAxis>& v) {
    int k = 0;  // the list in order, 4 bits per axis (kNumMeshAxes < 15)
    for (MeshAxis a : v) k = k * 16 + idx(a) + 1;
    return k;
  }

  std::unique_ptr<Communicator> make_group(const std::vector<MeshAxis>& list) {
    int64_t group_size = 1;
    for (MeshAxis a : list) group_size *= size(a);
    if (group_size == 1) return make_single_process_communicator();
    int64_t color = 0, k = 0;
    for (int a = 0; a < kNumMeshAxes; ++a)
      if (std::find(list.begin(), list.end(), static_cast<MeshAxis>(a)) == list.end())
        color = color * size(static_cast<MeshAxis>(a)) + coord_[a];
    for (MeshAxis a : list) k = k * size(a) + coord(a);
    return world_->split(static_cast<int>(color), static_cast<int>(k));
  }

  std::unique_ptr<Communicator> world_;
  std::array<int64_t, kNumMeshAxes> ici_{}, dcn_{}, coord_{};
  std::array<std::unique_ptr<Communicator>, kNumMeshAxes> axis_;
  std::map<int, std::unique_ptr<Communicator>> groups_;
  std::string host_;
  int64_t num_hosts_ = 1;
  int64_t position_ = 0;
};

}  // namespace

std::vector<std::string> all_gather_strings(Communicator& comm, const std::string& mine) {
  // Lengths first, then every string padded to the longest, moved as int64 words (the
  // communicator moves typed elements).
  const auto n = static_cast<size_t>(comm.size());
  int64_t len = static_cast<int64_t>(mine.size());
  std::vector<int64_t> lens(n);
  comm.all_gather(&len, lens.data(), 1, DType::kI64);
  const size_t words =
      std::max<size_t>((static_cast<size_t>(*std::max_element(lens.begin(), lens.end())) + 7) / 8, 1);
  std::vector<int64_t> buf(words, 0), all(words * n);
  std::memcpy(buf.data(), mine.data(), mine.size());
  comm.all_gather(buf.data(), all.data(), words, DType::kI64);
  std::vector<std::string> out;
  for (size_t r = 0; r < n; ++r)
    out.emplace_back(reinterpret_cast<const char*>(all.data() + r * words), static_cast<size_t>(lens[r]));
  return out;
}

DeviceCount count_devices(Communicator& world) {
  const HostLayout l = host_layout(gather_host_names(world));
  return {.num_devices = world.size(), .num_slices = static_cast<int64_t>(l.hosts.size())};
}

Communicator& batch_group(Mesh& mesh) {
  return mesh.axes({MeshAxis::kData, MeshAxis::kFsdp, MeshAxis::kExpert});
}

int64_t batch_readers(const Mesh& mesh) {
  return mesh.size(MeshAxis::kData) * mesh.size(MeshAxis::kFsdp) * mesh.size(MeshAxis::kExpert);
}

int64_t batch_reader(const Mesh& mesh) {
  return (mesh.coord(MeshAxis::kData) * mesh.size(MeshAxis::kFsdp) + mesh.coord(MeshAxis::kFsdp)) *
             mesh.size(MeshAxis::kExpert) +
         mesh.coord(MeshAxis::kExpert);
}

std::unique_ptr<Mesh> make_mesh(const Config& cfg, std::unique_ptr<Communicator> world) {
  TESSERA_ASSERT(world != nullptr);
  return std::make_unique<MeshImpl>(cfg, std::move(world));
}

}  // namespace tessera::dist
