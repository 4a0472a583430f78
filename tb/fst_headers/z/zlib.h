/* Declarations of the zlib functions and types Verilator's FST writer uses (include/fstcpp),
 * for machines with libz.so.1 but without the zlib1g-dev headers (see tb/fst.py).
 * They are zlib's stable public API: the library on the system provides them. */
#ifndef PATTON_FST_ZLIB_H
#define PATTON_FST_ZLIB_H
#ifdef __cplusplus
extern "C" {
#endif

typedef unsigned char Bytef;
typedef unsigned long uLong;
typedef uLong uLongf;

#define Z_OK 0

/* Upper bound of the compressed size of sourceLen bytes. */
uLong compressBound(uLong sourceLen);
/* Compress source into dest at level (0..9); *destLen: capacity in, size out; Z_OK on success. */
int compress2(Bytef* dest, uLongf* destLen, const Bytef* source, uLong sourceLen, int level);

#ifdef __cplusplus
}
#endif
#endif
