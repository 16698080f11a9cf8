/*
 * reflector.c: the socket-path ceiling for the steerdns benchmark harness (benches/harness.sh).
 *
 * It answers every datagram by sending it straight back with the DNS header's QR bit set: one
 * UDP socket, one thread, recvmmsg() a batch of up to 64 datagrams, flip the flag bits in place,
 * sendmmsg() the batch back. No parsing, no lookup, no copy. Whatever a real server does on top
 * of this is its own cost; whatever this costs is the kernel's and nobody can go below it with
 * ordinary sockets.
 *
 * Usage:  reflector ADDR PORT         e.g. reflector 127.0.0.1 15500
 * Runs in the foreground until SIGTERM or SIGINT, then prints how many datagrams it reflected.
 * Build:  cc -O2 -Wall -o reflector benches/reflector.c
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

enum { WIDTH = 64, ROOM = 2048, DNS_HEADER = 12 };

static volatile sig_atomic_t stopping;

static void on_signal(int sig) {
    (void)sig;
    stopping = 1;
}

/* Message i receives into slot i; the same headers are reused to send, only lengths change. */
struct batch {
    unsigned char data[WIDTH][ROOM];
    struct sockaddr_storage from[WIDTH];
    struct iovec iov[WIDTH];
    struct mmsghdr msg[WIDTH];
};

static void arm(struct batch *b) {
    for (int i = 0; i < WIDTH; i++) {
        b->iov[i].iov_base = b->data[i];
        b->iov[i].iov_len = ROOM;
        memset(&b->msg[i], 0, sizeof b->msg[i]);
        b->msg[i].msg_hdr.msg_name = &b->from[i];
        b->msg[i].msg_hdr.msg_namelen = sizeof b->from[i];
        b->msg[i].msg_hdr.msg_iov = &b->iov[i];
        b->msg[i].msg_hdr.msg_iovlen = 1;
    }
}

/* Turns query i into its "response" in place; returns 0 for a runt that is dropped. */
static int flip(struct batch *b, int i) {
    unsigned len = b->msg[i].msg_len;
    if (len < DNS_HEADER)
        return 0;
    unsigned char *h = b->data[i];
    h[2] = (unsigned char)((h[2] | 0x80) & ~0x02); /* QR on, TC off, opcode/AA/RD kept */
    h[3] &= 0x70;                                  /* RA off, RCODE NOERROR */
    b->iov[i].iov_len = len;
    return 1;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s ADDR PORT\n", argv[0]);
        return 2;
    }
    struct sockaddr_in local = {.sin_family = AF_INET, .sin_port = htons((unsigned short)atoi(argv[2]))};
    if (inet_pton(AF_INET, argv[1], &local.sin_addr) != 1) {
        fprintf(stderr, "reflector: not an IPv4 address: %s\n", argv[1]);
        return 2;
    }
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)&local, sizeof local) < 0) {
        perror("reflector: socket/bind");
        return 1;
    }
    /* Wake up now and then so a signal between two batches is noticed. */
    struct timeval wake = {.tv_sec = 0, .tv_usec = 100000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &wake, sizeof wake);
    struct sigaction sa = {.sa_handler = on_signal};
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);

    static struct batch b;
    unsigned long long reflected = 0;
    while (!stopping) {
        arm(&b);
        int got = recvmmsg(fd, b.msg, WIDTH, MSG_WAITFORONE, NULL);
        if (got <= 0)
            continue; /* timeout, EINTR: look at the flag again */
        int keep = 0;
        for (int i = 0; i < got; i++) {
            if (!flip(&b, i))
                continue;
            if (keep != i) { /* close the gap a runt left */
                b.iov[keep] = b.iov[i];
                b.msg[keep].msg_hdr = b.msg[i].msg_hdr;
                b.msg[keep].msg_hdr.msg_iov = &b.iov[keep];
            }
            keep++;
        }
        for (int sent = 0; sent < keep;) {
            int n = sendmmsg(fd, b.msg + sent, (unsigned)(keep - sent), 0);
            if (n < 0 && errno == EINTR)
                continue;
            sent += n > 0 ? n : 1; /* skip a datagram the kernel refused */
        }
        reflected += (unsigned long long)keep;
    }
    fprintf(stderr, "reflector: reflected %llu datagrams\n", reflected);
    close(fd);
    return 0;
}
