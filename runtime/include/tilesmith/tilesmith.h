/* tilesmith's C ABI, for other languages (Python ctypes, ...). Every call returns 0 on success
 * or a non-zero status; tilesmith_last_error() then holds a message for the calling thread. */
#ifndef TILESMITH_H
#define TILESMITH_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tilesmith_runtime tilesmith_runtime;

enum tilesmith_dtype { TILESMITH_F16 = 0, TILESMITH_BF16 = 1, TILESMITH_F32 = 2 };
/* TILESMITH_INVALID_ARGUMENT: the call's arguments are wrong (a NULL or misaligned pointer, a
 * non-positive or unsupported shape, an unknown dtype code); TILESMITH_ERROR: anything else (no
 * GPU, an unreadable database, a failed compile or launch). */
enum tilesmith_status { TILESMITH_OK = 0, TILESMITH_ERROR = 1, TILESMITH_INVALID_ARGUMENT = 2 };

/* database_path: NULL or "" for the default; device_ordinal: usually 0. */
int tilesmith_runtime_create(const char* database_path, int device_ordinal, tilesmith_runtime** out);
void tilesmith_runtime_destroy(tilesmith_runtime* runtime);

/* C[m x n] = A[m x k] * B[k x n], row-major; out_dtype is dtype or TILESMITH_F32. */
int tilesmith_matmul(tilesmith_runtime* runtime, const void* a, const void* b, void* c, int64_t m,
                     int64_t n, int64_t k, int dtype, int out_dtype, void* stream);

/* Writes the config the call would use ("block_k=32,...") and whether it is tuned. */
int tilesmith_matmul_config(tilesmith_runtime* runtime, int64_t m, int64_t n, int64_t k, int dtype,
                            int out_dtype, char* config, int config_capacity, int* tuned);

const char* tilesmith_last_error(void);

#ifdef __cplusplus
}
#endif
#endif
