/* abi_probe.c - prints the sizes and field offsets of tide.h's public structs
 * as the C compiler lays them out, for spec/bindings_spec.lua to compare with
 * what LuaJIT's ffi.cdef made of the same header. */
#include "tide.h"

#include <stddef.h>
#include <stdio.h>

#define SIZE(T)     printf("sizeof %s %zu\n", #T, sizeof(T))
#define OFF(T, f)   printf("offsetof %s %s %zu\n", #T, #f, offsetof(T, f))

int main(void) {
    SIZE(tide_tensor);
    OFF(tide_tensor, sizes); OFF(tide_tensor, strides); OFF(tide_tensor, offset); OFF(tide_tensor, nelem);
    OFF(tide_tensor, storage); OFF(tide_tensor, ndim); OFF(tide_tensor, dtype_id); OFF(tide_tensor, refcount);
    OFF(tide_tensor, flags); OFF(tide_tensor, dev); OFF(tide_tensor, tag);
    OFF(tide_tensor, ag_node); OFF(tide_tensor, ag_grad); OFF(tide_tensor, ag_output_nr);
    SIZE(tide_device);
    OFF(tide_device, type); OFF(tide_device, index);
    SIZE(tide_op_params);
    OFF(tide_op_params, ints); OFF(tide_op_params, scalars); OFF(tide_op_params, n_ints);
    OFF(tide_op_params, keepdim); OFF(tide_op_params, dtype); OFF(tide_op_params, flags);
    SIZE(tide_op_info);
    OFF(tide_op_info, name); OFF(tide_op_info, params); OFF(tide_op_info, n_in); OFF(tide_op_info, n_out);
    OFF(tide_op_info, flags); OFF(tide_op_info, has_cpu);
    SIZE(tide_mem_stats);
    OFF(tide_mem_stats, bytes_in_use); OFF(tide_mem_stats, n_reused);
    SIZE(tide_devmem_stats);
    OFF(tide_devmem_stats, bytes_reserved); OFF(tide_devmem_stats, n_ooms);
    SIZE(tide_csv_options);
    OFF(tide_csv_options, delimiter); OFF(tide_csv_options, header); OFF(tide_csv_options, dtype);
    return 0;
}
