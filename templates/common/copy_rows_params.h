// The arguments of copy_rows and transpose_rows (common/copy_rows.cuh), shared by host and
// kernel.
#pragma once

namespace tilesmith {

// A rows x cols matrix of ELEMENT_BYTES-byte elements copied from rows src_ld elements apart to
// rows dst_ld elements apart. The source may be a batch of matrices of batch_rows rows each,
// src_batch_stride elements apart; the destination's rows are packed across batches.
struct CopyRowsMatrix {
  const void* src;
  void* dst;
  long long rows, cols;
  long long src_ld, dst_ld;
  long long batch_rows, src_batch_stride;
};

// The matrices one launch copies (a matmul's A and B): rows of matrix[0], then of matrix[1];
// an unused matrix has 0 rows.
struct CopyRowsParams {
  CopyRowsMatrix matrix[2];
};

// A batch of rows x cols matrices (rows src_ld elements apart, batches src_batch_stride apart)
// written transposed, as cols x rows matrices with rows dst_ld apart, packed batch after batch.
struct TransposeParams {
  const void* src;
  void* dst;
  long long batches, rows, cols;
  long long src_ld, src_batch_stride, dst_ld;
};

}  // namespace tilesmith
