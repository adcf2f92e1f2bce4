#include "comm/mpi_types.h"

#include <mutex>

#include "comm/mpi_runtime.h"
#include "runtime/ops/elementwise.h"

namespace mt {
namespace {

template <BinaryOp Op>
void bf16_reduce(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const bf16*>(in);
  auto* b = static_cast<bf16*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = apply_binary(Op, a[i], b[i]);
}

// Created once per process, on first use, and left to MPI_Finalize: MPI frees them with the library.
struct Bf16Support {
  MPI_Datatype type = MPI_DATATYPE_NULL;
  MPI_Op sum = MPI_OP_NULL, max = MPI_OP_NULL, min = MPI_OP_NULL;
  Bf16Support() {
    MT_MPI_CHECK(MPI_Type_contiguous(2, MPI_BYTE, &type));
    MT_MPI_CHECK(MPI_Type_commit(&type));
    MT_MPI_CHECK(MPI_Op_create(&bf16_reduce<BinaryOp::Add>, 1, &sum));
    MT_MPI_CHECK(MPI_Op_create(&bf16_reduce<BinaryOp::Max>, 1, &max));
    MT_MPI_CHECK(MPI_Op_create(&bf16_reduce<BinaryOp::Min>, 1, &min));
  }
};

const Bf16Support& bf16_support() {
  static Bf16Support support;
  return support;
}

}  // namespace

MPI_Datatype mpi_datatype(DType dtype) {
  switch (dtype) {
    case DType::F32: return MPI_FLOAT;
    case DType::I32: return MPI_INT32_T;
    case DType::BF16: return bf16_support().type;
  }
  return MPI_DATATYPE_NULL;
}

MPI_Op mpi_reduce_op(ReduceOp op, DType dtype) {
  if (dtype == DType::BF16) {
    const Bf16Support& s = bf16_support();
    switch (op) {
      case ReduceOp::Sum:
      case ReduceOp::Avg: return s.sum;
      case ReduceOp::Max: return s.max;
      case ReduceOp::Min: return s.min;
    }
  }
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg: return MPI_SUM;
    case ReduceOp::Max: return MPI_MAX;
    case ReduceOp::Min: return MPI_MIN;
  }
  return MPI_OP_NULL;
}

}  // namespace mt
