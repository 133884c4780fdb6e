# The command line's image: the `quorumlock` binary built on this host, FROM scratch, with the
# shared libraries ldd lists for it and the host's CA bundle (for rediss://). Its build context
# is made by scripts/build-cli-image (rootfs/ holds the files); nothing is pulled.
#
#   docker run --rm --network host quorumlock/quorumlock:local doctor --nodes redis://127.0.0.1:7001,...
FROM scratch
COPY rootfs/ /
ENV PATH=/usr/local/bin:/usr/bin:/bin
WORKDIR /tmp
ENTRYPOINT ["/usr/local/bin/quorumlock"]
CMD ["--help"]
