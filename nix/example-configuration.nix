# A complete NixOS configuration for a k3s GPU node (an 8x H200 HGX agent)
# with nodeprep. The flake's checks.<system>.module-eval evaluates it with
# nixosModules.default; docs/nixos.md quotes it.
#
#   nixosConfigurations.gpu-node-1 = nixpkgs.lib.nixosSystem {
#     modules = [ nodeprep.nixosModules.default ./gpu-node-1.nix ];
#   };
{
  config,
  lib,
  pkgs,
  ...
}:
let
  textfileDir = "/var/lib/prometheus-node-exporter/textfile";
in
{
  # --- the machine: replace with your hardware-configuration.nix ---------
  nixpkgs.hostPlatform = lib.mkDefault "x86_64-linux";
  boot.loader.systemd-boot.enable = true;
  boot.loader.efi.canTouchEfiVariables = true;
  fileSystems."/" = {
    device = "/dev/disk/by-label/nixos";
    fsType = "ext4";
  };
  fileSystems."/boot" = {
    device = "/dev/disk/by-label/ESP";
    fsType = "vfat";
  };
  networking.hostName = "gpu-node-1";
  system.stateVersion = "25.11";

  # --- NVIDIA driver, with its Vulkan and EGL parts ----------------------
  # The driver's userspace (Vulkan ICD, EGL vendor library, libnvidia-ml)
  # is linked under /run/opengl-driver by hardware.graphics; that is where
  # nodeprep finds what the CDI generator leaves out.
  nixpkgs.config.allowUnfreePredicate =
    pkg:
    builtins.elem (lib.getName pkg) [
      "nvidia-x11"
      "nvidia-settings"
      "nvidia-persistenced"
    ];
  services.xserver.videoDrivers = [ "nvidia" ]; # loads the driver; no X server is started
  hardware.graphics.enable = true;
  hardware.nvidia = {
    package = config.boot.kernelPackages.nvidiaPackages.production;
    open = true; # Hopper and newer
    nvidiaPersistenced = true; # headless: keep the GPUs initialised
  };
  # HGX/DGX boards with NVSwitch need the fabric manager (nvidia-fabricmanager):
  # until it has registered the GPUs every CUDA call fails with 802 ("system
  # not yet initialized") and nodeprep reports them unhealthy (inspect's
  # FABRIC column: not-started). Not through hardware.nvidia.datacenter.enable
  # here: nixpkgs' nvidia module asserts it is not combined with
  # videoDrivers = [ "nvidia" ], and hardware.nvidia-container-toolkit does
  # not turn hardware.graphics on in datacenter mode (set it yourself there,
  # so the driver's libraries land under /run/opengl-driver, where nodeprep
  # looks). Or run nv-fabricmanager from a unit of your own, as here.

  # --- CDI: the generator nodeprep patches -------------------------------
  hardware.nvidia-container-toolkit = {
    enable = true;
    # Name devices GPU-<uuid>, what the NVIDIA device plugin asks for and
    # what nodeprep checks (settings.cdi.deviceNames, default [ "uuid" ]).
    # The option takes one strategy; to serve index names as well, add
    # extraArgs = [ "--device-name-strategy=index" ] and
    # settings.cdi.deviceNames = [ "uuid" "index" ].
    device-name-strategy = "uuid";
  };

  # --- k3s agent ---------------------------------------------------------
  # k3s's embedded containerd reads CDI specs from /var/run/cdi; nodeprep
  # gives it the node's labels and taints through
  # /etc/rancher/k3s/config.yaml.d/50-nodeprep.yaml before it starts.
  services.k3s = {
    enable = true;
    role = "agent";
    serverAddr = "https://k3s.example.internal:6443";
    tokenFile = "/run/secrets/k3s-token"; # provisioned out of band (sops-nix, agenix, ...)
  };
  networking.firewall = {
    allowedTCPPorts = [ 10250 ]; # kubelet
    allowedUDPPorts = [ 8472 ]; # flannel VXLAN
  };

  # --- nodeprep ----------------------------------------------------------
  services.nodeprep = {
    enable = true;
    # Only pods that tolerate this taint land here (see docs/nixos.md's pod
    # spec); it is on the node from its first registration.
    taints = [ "nvidia.com/gpu=present:NoSchedule" ];
    labels = [ "node.example.com/pool=gpu-h200" ];
    # A node whose GPUs cannot render keeps k3s stopped.
    onSelftestFailure = "block";
    metrics.textfileDir = textfileDir;
    settings = {
      # Wait for a manual `nodeprep` run holding the lock.
      wait = "30s";
      selftest.timeout = "45s";
    };
  };

  # node_exporter picks up nodeprep.prom (nodeprep_ready, nodeprep_gpus, ...).
  services.prometheus.exporters.node = {
    enable = true;
    enabledCollectors = [ "textfile" ];
    extraFlags = [ "--collector.textfile.directory=${textfileDir}" ];
  };
}
