# nodeprep, built with buildGoModule.
#
#   nix build .#default          (the flake calls this with its version)
#   nix-build -E 'with import <nixpkgs> { }; callPackage ./nix/package.nix { }'
#
# cgo is on: the self-test's shim (nodeprep/selftest/shim.c) includes
# <vulkan/vulkan.h> and <EGL/egl.h> but links only -ldl — libvulkan.so.1
# and libEGL.so.1 are dlopened at run time (the NixOS module passes their
# store paths with --vulkan-loader/--egl-lib), so the binary has no runtime
# dependency on them.
#
# The Go tests do not run in this build (doCheck = false): the flake's
# checks.<system>.go-tests builds it again with doCheck = true, which runs
# `go test ./...` over every package (buildGoModule's own checkPhase would
# test only subPackages) against Mesa's lavapipe (Vulkan on the CPU) and
# Mesa's EGL, exactly as `make unit` does on Debian.
{
  lib,
  stdenv,
  buildGoModule,
  installShellFiles,
  vulkan-headers,
  vulkan-loader,
  libglvnd,
  mesa,
  version ? "dev",
  commit ? "",
}:

let
  # Only what the Go build and its tests read, so editing nix/, the README,
  # the hand-written docs or the other scripts does not rebuild (or
  # re-vendor) anything.
  root = ../.;
  src = lib.fileset.toSource {
    inherit root;
    fileset = lib.fileset.unions [
      (root + "/go.mod")
      (root + "/go.sum")
      (root + "/cmd")
      (root + "/nodeprep")
      (root + "/cdi")
      (lib.fileset.maybeMissing (root + "/testdata"))
      # The tests compare the generated reference and man pages with
      # these, and run the demo script.
      (lib.fileset.maybeMissing (root + "/docs/cli"))
      (root + "/docs/man") # installed by postInstall
      (lib.fileset.maybeMissing (root + "/scripts/demo.sh"))
    ];
  };

  # Mesa's lavapipe ICD and EGL vendor manifest, for the tests.
  lvpICD = "${mesa}/share/vulkan/icd.d/lvp_icd.${stdenv.hostPlatform.uname.processor}.json";
  mesaEGL = "${mesa}/share/glvnd/egl_vendor.d/50_mesa.json";
in
buildGoModule {
  pname = "nodeprep";
  inherit version src;

  # The hash of the vendored Go modules: the NAR hash of `go mod vendor`
  # over go.mod/go.sum and the Go packages, as buildGoModule makes it.
  # `scripts/vendor-hash.sh --update` recomputes it without nixpkgs, and
  # `make nix-check` (so `make test` and CI) fails when it is stale.
  vendorHash = "sha256-+jpp+pIptLIdgtecL0Pjt6MsvK7AGBO2Pxe+L3vWzMM=";

  # buildGoModule names the vendor derivation after name/version, and the
  # flake's version carries the git revision: without a fixed name every
  # commit (and checks.go-tests, another pname) would re-vendor from the
  # network. The hash, not the name, says what is inside — so a vendorHash
  # left stale after go.mod/go.sum change reuses the old vendor directory
  # and `go build` stops with "inconsistent vendoring": update it as above.
  overrideModAttrs = _: { name = "nodeprep-go-modules"; };

  # nodeprep, its lean child and nodeprep-cluster, installed side by side
  # in $out/bin: nodeprep runs nodeprep-probe for the probes and the NVML
  # inventory, and nodeprep-cluster for `nodeprep cluster` (the commands
  # that link the Kubernetes API types), when it finds them beside its own
  # executable (docs/faults.md).
  subPackages = [
    "cmd/nodeprep"
    "cmd/nodeprep-probe"
    "cmd/nodeprep-cluster"
  ];

  env.CGO_ENABLED = "1";
  nativeBuildInputs = [ installShellFiles ];
  # Headers only: vulkan-headers gives <vulkan/vulkan.h>, libglvnd's dev
  # output <EGL/egl.h> and <EGL/eglext.h>.
  buildInputs = [
    vulkan-headers
    libglvnd
  ];

  ldflags = [
    "-s"
    "-w"
    "-X github.com/nodeprep/nodeprep/cmd/nodeprep/app.version=${version}"
    "-X github.com/nodeprep/nodeprep/cmd/nodeprep/app.commit=${commit}"
  ];

  # The man pages are docs/man/man1, generated from the cobra commands and kept
  # current by a test (TestDocsUpToDate). Shell completions come from the
  # built binary itself (`nodeprep completion SHELL`), so they always match
  # its flags; cross builds cannot run it and go without.
  postInstall = ''
    installManPage docs/man/man1/*.1
  '' + lib.optionalString (stdenv.buildPlatform.canExecute stdenv.hostPlatform) ''
    installShellCompletion --cmd nodeprep \
      --bash <($out/bin/nodeprep completion bash) \
      --zsh <($out/bin/nodeprep completion zsh) \
      --fish <($out/bin/nodeprep completion fish)
  '';

  # See the header: checks.go-tests overrides this to true.
  doCheck = false;
  nativeCheckInputs = [ mesa ];
  checkPhase = ''
    runHook preCheck
    export VK_DRIVER_FILES=${lvpICD}
    export __EGL_VENDOR_LIBRARY_FILENAMES=${mesaEGL}
    # The shim dlopens libvulkan.so.1 and libEGL.so.1 by name in the tests;
    # glvnd then loads Mesa's libEGL_mesa.so.0.
    export LD_LIBRARY_PATH=${
      lib.makeLibraryPath [
        vulkan-loader
        libglvnd
        mesa
      ]
    }
    # No GPU in the sandbox: NVML is absent, tests use --simulate.
    go test -count=1 ./...
    runHook postCheck
  '';

  meta = {
    description = "Turn a NixOS machine with NVIDIA GPUs into a k3s GPU node (CDI patch, Vulkan/EGL self-test, join config)";
    homepage = "https://github.com/nodeprep/nodeprep";
    license = lib.licenses.asl20;
    mainProgram = "nodeprep";
    platforms = [
      "x86_64-linux"
      "aarch64-linux"
    ];
  };
}
