// What one kernel transmit stamp costs a UDP send, out of any tool: the CPU time (user and
// system, getrusage) of a send to a socket on loopback, its datagram read back and, when
// stamped, its stamp read from the error queue; per send, each way of asking, the ways
// alternated round by round, medians printed. Issue 54's question: is the mesh reflector's
// stamp of each answer (`--mesh-follow-up`) cheaper some other way the kernel offers?
//
//   gcc -O2 -o /tmp/tx_stamp_cost bench/tx_stamp_cost.c && /tmp/tx_stamp_cost [SENDS] [ROUNDS]
//
// Ways: `plain` asks nothing; `two` asks per send with `SO_TIMESTAMPING` and keys it with
// `SCM_TS_OPT_ID` (as the mesh does: 48 bytes of control messages, which the kernel
// `sock_kmalloc`s); `one` asks per send and lets the socket's count key it (24 bytes, on the
// kernel's stack); `wide` has the socket stamp every send and keys each with
// `SCM_TS_OPT_ID` alone. Each with `OPT_TSONLY` (the kernel allocates an empty packet for
// the stamp) and without (it clones the sent one).
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <linux/errqueue.h>
#include <linux/net_tstamp.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#ifndef SCM_TS_OPT_ID
#define SCM_TS_OPT_ID 81
#endif

enum way { PLAIN, TWO, ONE, WIDE, WAYS };
static const char *names[WAYS] = {"plain", "two", "one", "wide"};

static double cpu_s(void) {
    struct rusage r;
    getrusage(RUSAGE_SELF, &r);
    return r.ru_utime.tv_sec + r.ru_stime.tv_sec +
           (r.ru_utime.tv_usec + r.ru_stime.tv_usec) / 1e6;
}

static void push(char *ctl, size_t *len, int type, unsigned value) {
    struct cmsghdr *h = (struct cmsghdr *)(ctl + *len);
    h->cmsg_level = SOL_SOCKET;
    h->cmsg_type = type;
    h->cmsg_len = CMSG_LEN(sizeof value);
    memcpy(CMSG_DATA(h), &value, sizeof value);
    *len += CMSG_SPACE(sizeof value);
}

// Microseconds of CPU a send costs, `sends` of them; exits when a stamp asked is missing.
static double run(enum way way, int tsonly, int sends) {
    int rx = socket(AF_INET, SOCK_DGRAM, 0), tx = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof to;
    if (rx < 0 || tx < 0 || bind(rx, (struct sockaddr *)&to, sizeof to) ||
        getsockname(rx, (struct sockaddr *)&to, &alen)) {
        perror("socket");
        exit(1);
    }
    unsigned flags = SOF_TIMESTAMPING_SOFTWARE | SOF_TIMESTAMPING_OPT_ID |
                     (tsonly ? SOF_TIMESTAMPING_OPT_TSONLY : 0) |
                     (way == WIDE ? SOF_TIMESTAMPING_TX_SOFTWARE : 0);
    if (way != PLAIN && setsockopt(tx, SOL_SOCKET, SO_TIMESTAMPING, &flags, sizeof flags)) {
        perror("SO_TIMESTAMPING");
        exit(1);
    }
    char payload[100] = {0}, back[2048], ctl[64] __attribute__((aligned(8))), err_ctl[512];
    int stamps = 0;
    double start = cpu_s();
    for (int i = 0; i < sends; i++) {
        size_t len = 0;
        memset(ctl, 0, sizeof ctl);
        if (way == TWO || way == ONE)
            push(ctl, &len, SO_TIMESTAMPING, SOF_TIMESTAMPING_TX_SOFTWARE);
        if (way == TWO || way == WIDE)
            push(ctl, &len, SCM_TS_OPT_ID, (unsigned)i);
        struct iovec iov = {payload, sizeof payload};
        struct msghdr m = {.msg_name = &to, .msg_namelen = sizeof to, .msg_iov = &iov,
                           .msg_iovlen = 1, .msg_control = len ? ctl : NULL,
                           .msg_controllen = len};
        if (sendmsg(tx, &m, 0) < 0) {
            perror("sendmsg");
            exit(1);
        }
        if (recv(rx, back, sizeof back, 0) < 0) {
            perror("recv");
            exit(1);
        }
        if (way == PLAIN)
            continue;
        struct iovec eiov = {back, sizeof back};
        struct msghdr e = {.msg_iov = &eiov, .msg_iovlen = 1, .msg_control = err_ctl,
                           .msg_controllen = sizeof err_ctl};
        if (recvmsg(tx, &e, MSG_ERRQUEUE | MSG_DONTWAIT) >= 0)
            stamps++;
    }
    double us = (cpu_s() - start) / sends * 1e6;
    close(rx);
    close(tx);
    if (way != PLAIN && stamps != sends) {
        fprintf(stderr, "%s: %d stamps of %d sends\n", names[way], stamps, sends);
        exit(1);
    }
    return us;
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    int sends = argc > 1 ? atoi(argv[1]) : 200000, rounds = argc > 2 ? atoi(argv[2]) : 5;
    if (sends < 1 || rounds < 1 || rounds > 64) {
        fprintf(stderr, "usage: %s [SENDS >= 1] [ROUNDS 1-64]\n", argv[0]);
        return 2;
    }
    double us[WAYS][2][64];
    for (int r = 0; r < rounds; r++)
        for (int k = 0; k < 2 * WAYS; k++) {
            // Each round starts one way later, so no way always runs first.
            int j = (k + r) % (2 * WAYS);
            us[j / 2][j % 2][r] = run((enum way)(j / 2), j % 2, sends);
        }
    printf("CPU us a send (median of %d rounds of %d sends; min-max)\n", rounds, sends);
    for (int w = 0; w < WAYS; w++)
        for (int t = 1; t >= 0; t--) {
            if (w == PLAIN && t == 0)
                continue;
            qsort(us[w][t], rounds, sizeof(double), by_value);
            printf("  %-5s %-12s %.3f (%.3f-%.3f)\n", names[w], t ? "OPT_TSONLY" : "clone",
                   us[w][t][rounds / 2], us[w][t][0], us[w][t][rounds - 1]);
        }
    return 0;
}
