/* Declarations of the two LZ4 functions Verilator's FST writer calls (include/fstcpp),
 * for machines with liblz4.so.1 but without the liblz4-dev headers (see tb/fst.py).
 * They are LZ4's stable public block API: the library on the system provides them. */
#ifndef PATTON_FST_LZ4_H
#define PATTON_FST_LZ4_H
#ifdef __cplusplus
extern "C" {
#endif

/* Largest compressed size of an input of inputSize bytes (0 if inputSize is too large). */
int LZ4_compressBound(int inputSize);
/* Compress srcSize bytes of src into dst (capacity dstCapacity); bytes written, 0 on error. */
int LZ4_compress_default(const char* src, char* dst, int srcSize, int dstCapacity);

#ifdef __cplusplus
}
#endif
#endif
