// MPI datatypes and reduction ops for meshtrain dtypes. bf16 has no MPI type: it travels as a
// 2-byte type with user-defined ops that reduce through the shared functors (in float).
// defines: mpi_datatype, mpi_reduce_op
#pragma once

#include <mpi.h>

#include "comm/communicator.h"

namespace mt {

MPI_Datatype mpi_datatype(DType dtype);
// Avg is reduced as Sum; the caller divides afterwards.
MPI_Op mpi_reduce_op(ReduceOp op, DType dtype);

}  // namespace mt
