# shellcheck shell=bash
# Sourced by the GPU scripts (tests/gpu/run.sh, check.sh, cluster.sh, bench/gpu/run.sh): what a
# bundle needs on the GPU host, and how one is made here.

# gpu_bundle_env LIBDIR: the bundle's libraries, the CUDA toolkit's, and cuDNN 9's on the loader's
# path. cuDNN is loaded at run time by the cuDNN attention path (libcudnn.so.9); on the GPU
# hosts it is PyTorch's wheel's (nvidia-cudnn-cu13), outside the loader's search path.
gpu_bundle_env() {
  export LD_LIBRARY_PATH="$1${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}:/usr/local/cuda/lib64"
  local cudnn_lib
  cudnn_lib=$(python3 -c 'import nvidia.cudnn, os; print(os.path.join(list(nvidia.cudnn.__path__)[0], "lib"))' 2>/dev/null || true)
  if [ -n "$cudnn_lib" ] && [ -d "$cudnn_lib" ]; then export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$cudnn_lib"; fi
}

# gpu_bundle_copy BIN BINDIR LIBDIR: BIN into BINDIR, and the shared libraries it needs into
# LIBDIR: not libc's, and not the CUDA 13 ones (driver, runtime, cuBLAS, cuBLASLt, NCCL), which
# the GPU host has and which would not fit the 64 MiB a device run may carry.
gpu_bundle_copy() {
  cp "$1" "$2/"
  ldd "$1" | awk '/=> \// {print $3}' | while read -r lib; do
    case "$(basename "$lib")" in
      libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|ld-linux*|libcuda.so*) ;;
      libcudart.so*|libcublas.so*|libcublasLt.so*|libnccl.so*) ;;
      *) cp -L "$lib" "$3/" ;;
    esac
  done
}

# gpu_bundle_pack DIR: DIR packed as DIR.txz. xz, a third smaller than gzip here: the gzip'd
# bundle (57 MB with the norm tests) no longer fitted the 64 MiB a device run carries with the
# working tree. At -9 its 64 MiB window spans several binaries, which share most of their code
# (each links the same static libraries): the bundle with the daemons is 30 MB so (27 on one thread), 54 MB at -6.
gpu_bundle_pack() {
  XZ_OPT="${XZ_OPT:--9 -T0}" tar -cJf "$1.txz" "$1"
}

# gpu_bundle_unpack DIR: DIR from DIR.txz unless DIR is there (tar's xz, else Python's lzma).
gpu_bundle_unpack() {
  [ -d "$1" ] && return 0
  tar -xJf "$1.txz" 2>/dev/null || python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall()' "$1.txz"
}
