// What a receive stamp costs a read (issue 54): a TCP ping-pong over loopback between two
// threads, 64 B each way, CPU time per round trip (both threads) in four ways of reading:
//   0  recv, no stamps          1  recv, SO_TIMESTAMPING RX_SOFTWARE on (enabled, not read)
//   2  recvmsg with room for the stamp, RX_SOFTWARE on          3  the same, stamps off
// Build and run (root not needed; under the timing lock, alternating, medians):
//   gcc -O2 -pthread -o /tmp/rxstamp_cost bench/rxstamp_cost.c
//   flock /tmp/sonde-timing-tests.lock sh -c 'for r in 1 2 3 4 5; do for v in 0 1 2 3; do
//     /tmp/rxstamp_cost $v 200000; done; done'
// Prints: variant, CPU us per round trip, wall us per round trip.
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/resource.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <linux/net_tstamp.h>
#include <arpa/inet.h>
#include <time.h>
static int variant, iters;
static void rx(int fd, char *buf) {
  if (variant <= 1) { int n = 0; while (n < 64) { int r = recv(fd, buf + n, 64 - n, 0); if (r <= 0) exit(1); n += r; } return; }
  char ctl[256]; int n = 0;
  while (n < 64) {
    struct iovec iov = { buf + n, 64 - n };
    struct msghdr m = {0}; m.msg_iov = &iov; m.msg_iovlen = 1; m.msg_control = ctl; m.msg_controllen = sizeof ctl;
    int r = recvmsg(fd, &m, 0); if (r <= 0) exit(1); n += r;
  }
}
static void *echo(void *p) { int fd = *(int*)p; char buf[64]; for (int i = 0; i < iters; i++) { rx(fd, buf); send(fd, buf, 64, 0); } return 0; }
static double cpu(void) { struct rusage u; getrusage(RUSAGE_SELF, &u); return u.ru_utime.tv_sec + u.ru_utime.tv_usec/1e6 + u.ru_stime.tv_sec + u.ru_stime.tv_usec/1e6; }
int main(int argc, char **argv) {
  variant = atoi(argv[1]); iters = atoi(argv[2]);
  int l = socket(AF_INET, SOCK_STREAM, 0); struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(0x7f000001) };
  bind(l, (void*)&a, sizeof a); listen(l, 1); socklen_t al = sizeof a; getsockname(l, (void*)&a, &al);
  int c = socket(AF_INET, SOCK_STREAM, 0); connect(c, (void*)&a, sizeof a); int s = accept(l, 0, 0);
  int one = 1; setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, 4); setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, 4);
  if (variant == 1 || variant == 2) { unsigned f = SOF_TIMESTAMPING_RX_SOFTWARE | SOF_TIMESTAMPING_SOFTWARE | SOF_TIMESTAMPING_OPT_ID | SOF_TIMESTAMPING_OPT_TSONLY;
    setsockopt(c, SOL_SOCKET, SO_TIMESTAMPING, &f, 4); setsockopt(s, SOL_SOCKET, SO_TIMESTAMPING, &f, 4); usleep(50000); }
  pthread_t t; pthread_create(&t, 0, echo, &s);
  char buf[64] = {0}; struct timespec t0, t1; clock_gettime(CLOCK_MONOTONIC, &t0); double c0 = cpu();
  for (int i = 0; i < iters; i++) { send(c, buf, 64, 0); rx(c, buf); }
  clock_gettime(CLOCK_MONOTONIC, &t1); double c1 = cpu(); pthread_join(t, 0);
  double wall = (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec)/1e9;
  printf("%d %.3f %.3f\n", variant, (c1-c0)/iters*1e6, wall/iters*1e6);
  return 0;
}
