// Peers on other hosts over TCP streams of meshdma's own, one per pair of
// processes, issued and progressed by the device threads themselves.
//
// Why not MPI's own path: over TCP a message through MPI costs MPI's
// matching, its progress engine and, for meshdma's messages, a copy into
// the posted receive and one out of it. A stream carries the same wire
// messages (wire.h) with none of that: the issuing device writes the header
// and the source's bytes in one `sendmsg` (the source's memory itself,
// through an I/O vector of its contiguous runs), and the receiver reads the
// payload straight into the destination heap. Where the host has an RDMA
// device MPI stays the default (its path there is not TCP); see
// `RuntimeOptions::remote_transport`.
//
// Progress: a device that starts a DMA or signals writes to the socket
// itself; what the socket does not take at once is queued, and a device
// spinning in a wait (`Poll`) writes queued bytes and reads incoming ones.
// One progress thread per process covers the time when nobody polls: it
// sleeps in poll(2) on the sockets while no device polls, so an idle launch
// costs no core, and leaves the sockets to the devices while one does.
//
// Congestion control: CUBIC on every connection unless
// `RuntimeOptions::tcp_congestion` says otherwise. Under BBR (the kernel's
// default on the machine where this was measured) one connection carrying
// exchanges of 1 MiB or more both ways ran at about half the rate at random
// times; under CUBIC the single connection was as fast as one each way, or
// faster (`mpirun -np 2 --mca btl self,tcp socket-exchange-probe --rounds 3
// --congestion bbr|cubic`).
//
// Stream protocol, per ordered pair of processes: messages in order, each a
// `WireHeader`, its extras (layout, clock), then the payload: `value` bytes
// for a put (at any size; `inline_bytes` is 0), `inline_bytes` for an abort's
// reason, none for the others. Connections are made once, at start-up: each
// process listens on an ephemeral port of the chosen address, the addresses
// are exchanged through the process group, and each process connects to
// every lower rank and accepts every higher one. At shutdown each process
// sends a goodbye behind its last message and closes only once every peer's
// goodbye has arrived; a connection that closes or fails before its goodbye
// aborts the launch, naming the peer (a process that died).
#ifndef MESHDMA_DMA_TRANSPORT_SOCKET_SOCKET_TRANSPORT_H_
#define MESHDMA_DMA_TRANSPORT_SOCKET_SOCKET_TRANSPORT_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "meshdma/base/config.h"
#include "meshdma/dma/transport/transport.h"
#include "meshdma/topology/process_group.h"

namespace meshdma::dma_internal {

// Names the network interface whose IPv4 address the transport listens on
// (as `ip link` names it: "eth0", "ib0"). Unset: the loopback address when
// every process runs on this machine, else the first interface that is up
// and neither a loopback nor a container or VM bridge ("docker*", "virbr*",
// "veth*").
inline constexpr const char* kSocketInterfaceEnv =
    config::kSocketInterface.name;

// The congestion control asked of the connections
// (`RuntimeOptions::tcp_congestion`): a name the kernel offers ("cubic",
// "reno", "bbr", ... as /proc/sys/net/ipv4/tcp_available_congestion_control
// lists them) or "system" for the kernel's default; empty `name`: CUBIC
// where the kernel allows it, else its default. A name the kernel refuses
// is an error naming `source` (the option or the variable that asked).
struct TcpCongestion {
  std::string name;
  std::string source;
};

// OK when the kernel takes `congestion` (or it is empty or "system"), else
// the InvalidArgument naming its source. `Runtime::Create` checks a named one
// on every process, also where no connection will use it.
absl::Status CheckTcpCongestion(const TcpCongestion& congestion);

// True when this host has an RDMA device (a non-empty /sys/class/infiniband):
// there MPI's path between hosts is not TCP, and the default remote
// transport is MPI's.
bool HostHasRdmaDevice();

// Connects every pair of `processes` (collective; fails after `timeout`
// naming the ranks not reached) and returns the transport over those
// connections. `one_machine`: every process runs on this machine, so the
// loopback address serves unless kSocketInterfaceEnv names another.
// What the connections run, as the kernel reports it (one name, or each
// connection's where they differ), goes to `running_congestion`.
absl::StatusOr<std::unique_ptr<PolledTransport>> MakeSocketTransport(
    TransportHost* host, ProcessGroup& processes, bool one_machine,
    absl::Duration timeout, const TcpCongestion& congestion,
    std::string* running_congestion);

}  // namespace meshdma::dma_internal

#endif  // MESHDMA_DMA_TRANSPORT_SOCKET_SOCKET_TRANSPORT_H_
