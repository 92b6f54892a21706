/* What IP_RECVTOS costs a receiver, per datagram (BENCHMARKS.md, "Marks on every packet"):
 * 200,000 datagrams of 22 bytes are queued on a loopback socket (a 1 GiB receive buffer),
 * then read back with recvmmsg (batches of 64), with and without IP_RECVTOS (and the TOS
 * set on the sender), alternating; each side's CPU time per datagram from
 * CLOCK_THREAD_CPUTIME_ID, on one CPU. WALK=1 also walks each control message in user
 * space, as the receiver does.
 *   cc -O2 -o /tmp/recvtos_cost bench/recvtos_cost.c && /tmp/recvtos_cost 6   (root) */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define N 200000
#define B 64

static double cpu_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec * 1e9 + t.tv_nsec;
}

int main(int argc, char **argv) {
  int rounds = argc > 1 ? atoi(argv[1]) : 6, walk = getenv("WALK") != NULL;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(0, &one);
  sched_setaffinity(0, sizeof one, &one);
  static char bufs[B][2048];
  static unsigned long long control[B][8];
  for (int r = 0; r < rounds; r++)
    for (int k = 0; k < 2; k++) {
      int marked = (r % 2) ? 1 - k : k;
      int rx = socket(AF_INET, SOCK_DGRAM, 0), tx = socket(AF_INET, SOCK_DGRAM, 0);
      int big = 1 << 30, on = 1, tos = 0xb9;
      setsockopt(rx, SOL_SOCKET, SO_RCVBUFFORCE, &big, sizeof big);
      struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(0x7f000001)};
      socklen_t l = sizeof a;
      bind(rx, (void *)&a, sizeof a);
      getsockname(rx, (void *)&a, &l);
      connect(tx, (void *)&a, sizeof a);
      if (marked) {
        setsockopt(rx, IPPROTO_IP, IP_RECVTOS, &on, sizeof on);
        setsockopt(tx, IPPROTO_IP, IP_TOS, &tos, sizeof tos);
      }
      char pkt[22] = {0};
      struct iovec siov = {pkt, sizeof pkt};
      struct mmsghdr sm[B], rm[B];
      struct iovec iov[B];
      memset(sm, 0, sizeof sm);
      memset(rm, 0, sizeof rm);
      for (int i = 0; i < B; i++) {
        sm[i].msg_hdr.msg_iov = &siov;
        sm[i].msg_hdr.msg_iovlen = 1;
        iov[i].iov_base = bufs[i];
        iov[i].iov_len = sizeof bufs[i];
        rm[i].msg_hdr.msg_iov = &iov[i];
        rm[i].msg_hdr.msg_iovlen = 1;
        if (marked) rm[i].msg_hdr.msg_control = control[i];
      }
      double t0 = cpu_ns();
      for (int sent = 0; sent < N;) {
        int n = sendmmsg(tx, sm, B, 0);
        if (n <= 0) { perror("sendmmsg"); return 1; }
        sent += n;
      }
      double t1 = cpu_ns();
      long got = 0, tos_sum = 0;
      while (got < N) {
        if (marked)
          for (int i = 0; i < B; i++) rm[i].msg_hdr.msg_controllen = sizeof control[i];
        int n = recvmmsg(rx, rm, B, MSG_DONTWAIT, NULL);
        if (n <= 0) { fprintf(stderr, "read %ld of %d\n", got, N); return 1; }
        if (marked && walk)
          for (int i = 0; i < n; i++)
            for (struct cmsghdr *c = CMSG_FIRSTHDR(&rm[i].msg_hdr); c; c = CMSG_NXTHDR(&rm[i].msg_hdr, c))
              if (c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_TOS) tos_sum += *CMSG_DATA(c);
        got += n;
      }
      double t2 = cpu_ns();
      printf("%-8s send %4.0f ns/datagram, receive %4.0f ns/datagram\n", marked ? "marked" : "unmarked",
             (t1 - t0) / N, (t2 - t1) / got);
      close(rx);
      close(tx);
    }
  return 0;
}
