# Medians for the sweep scripts' summaries (status_sweep.sh, scale_sweep.sh).
# A list is a string of numbers separated by spaces, as the summaries
# collect them ("" + " " + value for each row).

# The median of `list`: the middle value, or the mean of the two middle ones.
function median(list,    n, a, i, j, t) {
  n = split(list, a, " ")
  for (i = 2; i <= n; ++i) {
    t = a[i]
    for (j = i - 1; j >= 1 && a[j] + 0 > t + 0; --j) a[j + 1] = a[j]
    a[j + 1] = t
  }
  return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}

# "median [min-max]" of `list`, two decimals.
function median_range(list,    n, a, i, lo, hi) {
  n = split(list, a, " ")
  lo = a[1]; hi = a[1]
  for (i = 2; i <= n; ++i) {
    if (a[i] + 0 < lo + 0) lo = a[i]
    if (a[i] + 0 > hi + 0) hi = a[i]
  }
  return sprintf("%.2f [%.2f-%.2f]", median(list), lo, hi)
}
