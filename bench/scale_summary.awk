# scale_sweep.sh's summary of its rows (sections 1-4 of its header). Rows:
# "LAUNCH N OP ROUND" then meshdma-bench's columns (5 size, 10 time, 12
# busbw, 21 vs_mpi), or "fused N KERNEL ROUND RATIO". `counts` is the device
# counts, ascending. Needs medians.awk.
function log2(x) { return log(x) / log(2) }
$1 == "fused" { fk = $2 " " $3; fused[fk] = fused[fk] " " $5; kernels[$3] = 1; next }
{
  k = $1 " " $2 " " $3 " " $5
  times[k] = times[k] " " $10
  busbw[k] = busbw[k] " " $12
  if ($21 != "N/A") vs[k] = vs[k] " " $21
  opsize[$3 " " $5] = 1
}
END {
  nc = split(counts, c, " ")
  few = c[1]; most = c[nc]
  n_keys = 0
  for (k in opsize) keys[++n_keys] = k
  # Ops by name, sizes ascending.
  for (i = 2; i <= n_keys; ++i) {
    t = keys[i]; split(t, tt, " ")
    for (j = i - 1; j >= 1; --j) {
      split(keys[j], kk, " ")
      if (kk[1] < tt[1] || (kk[1] == tt[1] && kk[2] + 0 <= tt[2] + 0)) break
      keys[j + 1] = keys[j]
    }
    keys[j + 1] = t
  }
  print "\n## 1. vs_mpi, processes: median [min-max]"
  for (i = 1; i <= n_keys; ++i) {
    line = keys[i] ":"
    for (j = 1; j <= nc; ++j) {
      k = "procs " c[j] " " keys[i]
      line = line sprintf("  %d: %s", c[j], vs[k] == "" ? "N/A" : median_range(vs[k]))
    }
    print line
  }
  print "\n## 2. scaling checks"
  for (i = 1; i <= n_keys; ++i) {
    split(keys[i], kk, " ")
    base = "procs " few " " keys[i]
    for (j = 2; j <= nc; ++j) {
      k = "procs " c[j] " " keys[i]
      if (times[k] == "" || times[base] == "") continue
      if (kk[2] >= 1048576) {
        r = median(busbw[k]) / median(busbw[base])
        printf "busbw flat: %s, %d over %d processes: %.2f %s\n", keys[i], c[j], few, r, (r >= 0.8 ? "ok" : "MISSED")
      }
      if (kk[1] == "all_reduce" && kk[2] == smallest_all_reduce()) {
        r = median(times[k]) / median(times[base])
        lim = log2(c[j]) / log2(few)
        printf "small all_reduce: %s B, time at %d over %d processes: %.2f (log2 bound %.2f) %s\n", kk[2], c[j], few, r, lim, (r <= lim ? "ok" : "MISSED")
      }
    }
    k = "procs " most " " keys[i]
    if (vs[k] != "") {
      r = median(vs[k])
      printf "vs Open MPI at %d processes: %s: %.2f %s\n", most, keys[i], r, (r >= 1.0 ? "ok" : "MISSED")
    }
  }
  print "\n## 3. time of N processes / time of one process of N threads (median)"
  for (i = 1; i <= n_keys; ++i) {
    line = keys[i] ":"
    for (j = 1; j <= nc; ++j) {
      p = "procs " c[j] " " keys[i]; t = "threads " c[j] " " keys[i]
      if (times[p] == "" || times[t] == "") continue
      line = line sprintf("  %d: %.2f", c[j], median(times[p]) / median(times[t]))
    }
    print line
  }
  print "\n## 4. fused kernels on N processes: overlapped / max(compute, communication)"
  for (kn in kernels) {
    line = kn ":"
    for (j = 1; j <= nc; ++j) {
      fk = c[j] " " kn
      if (fused[fk] != "") line = line sprintf("  %d: %s", c[j], median_range(fused[fk]))
    }
    print line
  }
}
function smallest_all_reduce(    i, s, best) {
  best = -1
  for (i = 1; i <= n_keys; ++i) {
    split(keys[i], s, " ")
    if (s[1] == "all_reduce" && (best < 0 || s[2] + 0 < best)) best = s[2] + 0
  }
  return best
}
