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
};

// The mesh of cfg's derived ici_parallelism / dcn_parallelism over `world` (whose size must be
// cfg.num_devices; kConfig otherwise).
std::unique_ptr<Mesh> make_mesh(const Config& cfg, std::unique_ptr<Communicator> world);

}  // namespace tessera::dist
