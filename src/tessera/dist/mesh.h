// The device mesh of a job: one rank per device, arranged along MaxText's mesh axes (config.h
// MeshAxis), each axis sized by ici_<axis>_parallelism x dcn_<axis>_parallelism (config/derive.cc
// fills the -1s). A rank's coordinate on each axis follows MaxText's order (data slowest, then
// stage, fsdp, ..., tensor fastest-varying within a slice; dcn axes outside ici axes).
//
// Each axis has the communicator of the ranks that differ from this one only on that axis; the
// training engine reduces gradients over {data, fsdp}, shards over fsdp and splits layers over
// tensor. A one-device mesh has size 1 everywhere and single-process communicators.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "tessera/config/config.h"
#include "tessera/dist/communicator.h"

namespace tessera::dist {

class Mesh {
 public:
  virtual ~Mesh() = default;
  virtual int64_t size(MeshAxis axis) const = 0;   // ici x dcn
  virtual int64_t coord(MeshAxis axis) const = 0;  // this rank's index along `axis`
  virtual Communicator& world() = 0;
  // The ranks that differ from this one only along `axis` (rank() == coord(axis)).
  virtual Communicator& axis(MeshAxis axis) = 0;
  // The ranks that differ only along the listed axes (e.g. {kData, kFsdp}: gradient reduction),
  // ranked with the first listed axis slowest.
  virtual Communicator& axes(std::initializer_list<MeshAxis> axes) = 0;
  virtual std::string describe() const = 0;  // one line: sizes per axis, this rank's coordinates, host

  // This rank's place in the mesh, 0 .. world size - 1: the slice (host) index times the devices
  // per slice plus the rank's index among its slice's ranks. Equal to world().rank() when the
  // launcher places ranks host by host (mpirun's default --map-by slot), not otherwise.
  virtual int64_t position() const = 0;
  // Ranks in the mesh (the product of all axis sizes).
  virtual int64_t num_devices() const = 0;
  // The bytes this rank passed into collectives on all of the mesh's communicators since they
  // were made (the logs report differences).
  virtual TrafficCounters traffic() const = 0;
  // The scratch held by all of the mesh's communicators (Communicator::scratch_bytes).
  virtual size_t scratch_bytes() const = 0;
};

// Every rank's `mine`, by rank (collective over `comm`; strings of any length).
std::vector<std::string> all_gather_strings(Communicator& comm, const std::string& mine);

// The ranks that read different rows of the batch: data x fsdp x expert (outside the MoE layers
// the expert axis is one more data axis, as in MaxText's activation_batch rule), ranked with data
// slowest; tensor ranks read the same rows. batch_reader() is this rank's index among them
// (batch_group().rank()); with expert = 1 the group and the index are data x fsdp's.
Communicator& batch_group(Mesh& mesh);
int64_t batch_readers(const Mesh& mesh);
int64_t batch_reader(const Mesh& mesh);

// The devices of a job as config/ counts them: the world's size, and its hosts (slices): ranks
// grouped by host name, every host running the same number of ranks (kConfig otherwise). Collective
// over `world`.
DeviceCount count_devices(Communicator& world);

// The mesh of cfg's derived ici_parallelism / dcn_parallelism over `world` (whose size must be
// cfg.num_devices; kConfig otherwise). Slices are hosts: with cfg.num_slices > 1 the world must run
// on exactly that many hosts, the same number of ranks on each (kConfig otherwise); with one slice
// every rank is in it wherever it runs. Collective over `world`; so is axes()'s first call for a
// list of axes other than {kData, kFsdp} (made here), which every rank must make.
std::unique_ptr<Mesh> make_mesh(const Config& cfg, std::unique_ptr<Communicator> world);

}  // namespace tessera::dist
