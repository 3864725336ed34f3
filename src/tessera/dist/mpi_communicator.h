// The MPI side of dist/: starting and stopping MPI, the world communicator of a launched job, and
// the Communicator over an MPI communicator (mpi_communicator.cc).
//
// A process takes part in an MPI job only when a launcher started it: mpirun (OpenMPI sets
// OMPI_COMM_WORLD_SIZE), a PMIx launcher (PMIX_RANK), a PMI-1/2 launcher such as srun with
// --mpi=pmi2 (PMI_SIZE), or Slurm's srun (SLURM_PROCID). Then make_world_communicator() calls
// MPI_Init_thread once (MPI_THREAD_FUNNELED: only the thread that called it makes MPI calls, and
// Tessera's OpenMP kernels never do) and registers MPI_Finalize to run at exit. A process started
// on its own gets the single-process communicator and never touches MPI, so `tessera train` works
// where no MPI daemon can start.
//
// Every MPI call is checked. The communicators use MPI_ERRORS_RETURN, so a failed call comes back
// as Error(kRuntime) naming the call and MPI's message instead of MPI's default abort; what the
// program does next (print and abort the job, see cli/commands.cc) is cli/'s choice. A peer that
// is killed is noticed by mpirun, which then ends every rank (tests/dist/kill_test.cc).
#pragma once

#include <memory>
#include <string>
#include <utility>

#include "tessera/dist/communicator.h"

namespace tessera::dist {

// Whether a launcher started this process (the environment variables above).
bool launched_by_mpi();

// MPI's world when launched_by_mpi(), else the single-process communicator.
std::unique_ptr<Communicator> make_world_communicator();

// MPI's world (initialising MPI on the first call); throws kRuntime when MPI cannot start.
std::unique_ptr<Communicator> make_mpi_world_communicator();

// Whether MPI_Init_thread has run in this process (and MPI_Finalize has not).
bool mpi_active();

// MPI_Abort(MPI_COMM_WORLD, code): ends every rank of the job. For cli/ only (library code never
// ends the process); does nothing when MPI is not active.
void abort_job(int code);

// MPI_COMM_WORLD's rank and size, for error reports; {0, 1} when MPI is not active.
std::pair<int, int> mpi_world_rank_size();

// This machine's host name (gethostname), the unit the mesh counts slices in.
std::string host_name();

}  // namespace tessera::dist
