# cython: language_level=3
"""bench.experiments.native_ha_sender's thread: one HA connection's frames (the 12-byte header,
then ``sendfile`` of the commit-log range) sent in submission order by a pthread that never
takes the GIL. A measurement patch, not product code."""

from libc.stdlib cimport malloc, free
from libc.errno cimport errno, EAGAIN, EINTR

cdef extern from "<pthread.h>" nogil:  # (_GNU_SOURCE: Python.h defines it)
    ctypedef unsigned long pthread_t
    ctypedef struct pthread_mutex_t:
        pass
    ctypedef struct pthread_cond_t:
        pass
    int pthread_mutex_init(pthread_mutex_t*, void*)
    int pthread_mutex_lock(pthread_mutex_t*)
    int pthread_mutex_unlock(pthread_mutex_t*)
    int pthread_cond_init(pthread_cond_t*, void*)
    int pthread_cond_wait(pthread_cond_t*, pthread_mutex_t*)
    int pthread_cond_signal(pthread_cond_t*)
    int pthread_create(pthread_t*, void*, void* (*)(void*) noexcept nogil, void*)
    int pthread_join(pthread_t, void**)
    pthread_t pthread_self()
    int pthread_setname_np(pthread_t, const char*)

cdef extern from "<unistd.h>" nogil:
    int dup(int)
    int close(int)

cdef extern from "<sys/types.h>":
    ctypedef long off_t
    ctypedef long ssize_t

cdef extern from "<sys/sendfile.h>" nogil:
    ssize_t sendfile(int, int, off_t*, size_t)

cdef extern from "<sys/socket.h>" nogil:
    ssize_t send(int, const void*, size_t, int)
    int MSG_MORE
    int MSG_NOSIGNAL

cdef extern from "<poll.h>" nogil:
    struct pollfd:
        int fd
        short events
        short revents
    int poll(pollfd*, unsigned long, int)
    short POLLOUT

cdef struct Job:
    int file_fd
    long long offset
    long long position
    long long size
    Job* next


cdef struct Shared:
    pthread_mutex_t lock
    pthread_cond_t cond
    Job* head
    Job* tail
    long long queued
    long long sent
    int error
    int stop
    int sock_fd


cdef int _wait_out(Shared* s) noexcept nogil:
    cdef pollfd p
    p.fd = s.sock_fd
    p.events = POLLOUT
    p.revents = 0
    poll(&p, 1, 100)
    return s.stop


cdef int _failed(Shared* s) noexcept nogil:
    """After a failed call: 0 to try again (the socket had no room: waited), -1 when the
    sender stops meanwhile, else the errno."""
    if errno == EAGAIN or errno == EINTR:
        return -1 if _wait_out(s) else 0
    return errno


cdef int _send_job(Shared* s, Job* job) noexcept nogil:
    cdef unsigned char head[12]
    cdef long long off = job.offset
    cdef long long sz = job.size
    cdef int i
    for i in range(8):
        head[i] = (off >> (56 - 8 * i)) & 0xFF
    for i in range(4):
        head[8 + i] = (sz >> (24 - 8 * i)) & 0xFF
    cdef size_t done = 0
    cdef ssize_t n
    cdef int flags = MSG_NOSIGNAL | (MSG_MORE if sz > 0 else 0)
    while done < 12:
        n = send(s.sock_fd, head + done, 12 - done, flags)
        if n < 0:
            n = _failed(s)
            if n:
                return n
            continue
        done += n
    cdef off_t pos = job.position
    cdef long long left = sz
    while left > 0:
        n = sendfile(s.sock_fd, job.file_fd, &pos, left)
        if n < 0:
            n = _failed(s)
            if n:
                return n
            continue
        if n == 0:
            return 5
        left -= n
    return 0


cdef void* _run(void* arg) noexcept nogil:
    cdef Shared* s = <Shared*>arg
    cdef Job* job
    cdef int rc
    pthread_setname_np(pthread_self(), b"ha-sender")
    while True:
        pthread_mutex_lock(&s.lock)
        while s.head == NULL and not s.stop:
            pthread_cond_wait(&s.cond, &s.lock)
        if s.stop:
            pthread_mutex_unlock(&s.lock)
            return NULL
        job = s.head
        s.head = job.next
        if s.head == NULL:
            s.tail = NULL
        pthread_mutex_unlock(&s.lock)
        rc = 0 if s.error else _send_job(s, job)
        if job.file_fd >= 0:
            close(job.file_fd)
        pthread_mutex_lock(&s.lock)
        s.queued -= job.size
        if rc == 0:
            s.sent += job.size
        elif rc > 0 and not s.error:
            s.error = rc
        pthread_mutex_unlock(&s.lock)
        free(job)


cdef class HASender:
    cdef Shared* s
    cdef pthread_t thread
    cdef bint started

    def __cinit__(self, int sock_fd):
        self.s = <Shared*>malloc(sizeof(Shared))
        self.s.head = NULL
        self.s.tail = NULL
        self.s.queued = 0
        self.s.sent = 0
        self.s.error = 0
        self.s.stop = 0
        self.s.sock_fd = dup(sock_fd)
        pthread_mutex_init(&self.s.lock, NULL)
        pthread_cond_init(&self.s.cond, NULL)
        if pthread_create(&self.thread, NULL, _run, self.s) != 0:
            raise OSError("pthread_create failed")
        self.started = True

    def submit(self, long long offset, int file_fd, long long position, long long size):
        cdef Job* job = <Job*>malloc(sizeof(Job))
        job.file_fd = dup(file_fd) if size > 0 else -1
        job.offset = offset
        job.position = position
        job.size = size
        job.next = NULL
        cdef int err
        with nogil:
            pthread_mutex_lock(&self.s.lock)
            err = self.s.error
            if self.s.tail == NULL:
                self.s.head = job
            else:
                self.s.tail.next = job
            self.s.tail = job
            self.s.queued += size
            pthread_cond_signal(&self.s.cond)
            pthread_mutex_unlock(&self.s.lock)
        if err:
            raise OSError(err, "HA sender thread")

    @property
    def queued(self):
        return self.s.queued

    def close(self):
        if not self.started:
            return
        self.started = False
        cdef Job* job
        cdef Job* nxt
        with nogil:
            pthread_mutex_lock(&self.s.lock)
            self.s.stop = 1
            pthread_cond_signal(&self.s.cond)
            pthread_mutex_unlock(&self.s.lock)
            pthread_join(self.thread, NULL)
        job = self.s.head
        while job != NULL:
            nxt = job.next
            if job.file_fd >= 0:
                close(job.file_fd)
            free(job)
            job = nxt
        self.s.head = self.s.tail = NULL
        close(self.s.sock_fd)

    def __dealloc__(self):
        self.close()
        free(self.s)
