/* ref.c - placeholder; reference loops for the benchmarks land with bench/. */
int tide_bench_ref_placeholder(void) { return 0; }
