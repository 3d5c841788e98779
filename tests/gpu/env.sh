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
