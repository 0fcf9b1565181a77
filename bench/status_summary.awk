# status_sweep.sh's summary of its rows, sorted by launch, op and size: per
# launch, op and size the median vs_mpi [min-max]; on one host the median
# of_bound and the in-place call's; for the ring rows auto's speed-up over
# the ring. Columns: 1 launch, 2 op, 3 round, then meshdma-bench's own (4
# size, 9 time, 20 vs_mpi, 22 of_bound, 24 ip_of_bound). Needs medians.awk.
function flush() {
  if (key == "") return
  line = key ": " median_range(vs)
  if (launch ~ /^one_host/ && bound != "") line = line sprintf("; of_bound %.2f", median(bound))
  if (launch ~ /^one_host/ && ip_bound != "") line = line sprintf(", in place %.2f", median(ip_bound))
  time[key] = median(times)
  if (launch == "hosts_2x2_ring" && time["hosts_2x2 " op " " size] > 0) {
    line = line sprintf("; auto over ring %.2f", time[key] / time["hosts_2x2 " op " " size])
  }
  print line
}
{
  k = $1 " " $2 " " $4
  if (k != key) { flush(); key = k; launch = $1; op = $2; size = $4; vs = ""; bound = ""; ip_bound = ""; times = "" }
  vs = vs " " $20
  times = times " " $9
  if ($22 != "" && $22 != "N/A") bound = bound " " $22
  if ($24 != "" && $24 != "N/A") ip_bound = ip_bound " " $24
}
END { flush() }
