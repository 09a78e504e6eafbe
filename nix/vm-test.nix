# checks.<system>.vm: a NixOS VM (no GPU) runs `nodeprep up` the way the
# unit does — the same config file and command line, built by ./lib.nix —
# against a copy of testdata/hosts/nixos-h200 with a simulated DGX H200, and
# Mesa's lavapipe and EGL standing in for the NVIDIA driver. Then it checks
# the verdict, the drop-in and the metrics file.
#
# The module itself is not started here: it requires
# hardware.nvidia-container-toolkit, whose generator needs a real driver.
# checks.<system>.module-eval covers the unit's evaluation.
{
  pkgs,
  nodeprep,
}:
let
  inherit (pkgs) lib;
  nplib = import ./lib.nix;

  hostTree = ../testdata/hosts/nixos-h200;
  root = "/tmp/root";
  textfileDir = "/var/lib/prometheus-node-exporter/textfile";

  # The module's options, as in example-configuration.nix.
  moduleOpts = {
    taints = [ "nvidia.com/gpu=present:NoSchedule" ];
    labels = [ "node.example.com/pool=gpu-h200" ];
    onSelftestFailure = "block";
    metricsTextfileDir = textfileDir;
    settings = {
      wait = "30s";
      selftest.timeout = "45s";
    };
    # Not a node-label/node-taint: passes nothing (those are refused, see
    # lib.k3sNodeArgConflicts).
    k3sExtraFlags = [ "--disable traefik" ];
    vulkanLoader = "${lib.getLib pkgs.vulkan-loader}/lib/libvulkan.so.1";
    eglLib = "${lib.getLib pkgs.libglvnd}/lib/libEGL.so.1";
    # With --simulate there is no NVML to load.
    nvmlLib = null;
  };
  opts = moduleOpts // {
    configFile = pkgs.writeText "nodeprep-config.yaml" (nplib.renderConfig moduleOpts);
  };

  argv =
    [ (lib.getExe nodeprep) ]
    ++ nplib.execArgs opts
    ++ [
      "--root=${root}"
      "--simulate=dgx-h200"
      "--allow-cpu-adapter"
    ];

  lavapipe = "${pkgs.mesa}/share/vulkan/icd.d/lvp_icd.${pkgs.stdenv.hostPlatform.uname.processor}.json";
  mesaEGL = "${pkgs.mesa}/share/glvnd/egl_vendor.d/50_mesa.json";
in
pkgs.testers.runNixOSTest {
  name = "nodeprep-up";

  nodes.machine = {
    hardware.graphics.enable = true;
    environment.systemPackages = [
      nodeprep
      pkgs.jq
    ];
    virtualisation.memorySize = 2048;
    virtualisation.cores = 2;
  };

  testScript = ''
    machine.wait_for_unit("multi-user.target")

    with subtest("a host tree like an H200 NixOS node"):
        machine.succeed("cp -a ${hostTree} ${root} && chmod -R u+w ${root}")
        # What the module's tmpfiles rules create.
        machine.succeed("mkdir -p ${root}/etc/rancher/k3s/config.yaml.d ${root}/run/nodeprep ${root}${textfileDir}")

    with subtest("nodeprep up, with the unit's command line"):
        out = machine.succeed(
            "VK_DRIVER_FILES=${lavapipe} "
            "__EGL_VENDOR_LIBRARY_FILENAMES=${mesaEGL} "
            "LD_LIBRARY_PATH=${pkgs.mesa}/lib "
            + ${builtins.toJSON (lib.escapeShellArgs argv)}
            + " 2>&1"
        )
        print(out)

    with subtest("status.json says ready"):
        machine.succeed("jq -e '.ready == true and .tainted == false and .simulated == true' ${root}/run/nodeprep/status.json")

    with subtest("the k3s drop-in carries the taint and the labels"):
        dropin = "${root}/etc/rancher/k3s/config.yaml.d/50-nodeprep.yaml"
        machine.succeed(f"test -s {dropin}")
        machine.succeed(f"grep -F 'nvidia.com/gpu=present:NoSchedule' {dropin}")
        machine.succeed(f"grep -F 'node.example.com/pool=gpu-h200' {dropin}")
        # GPU Feature Discovery labels are on by default (join.gfdLabels).
        machine.succeed(f"grep -F 'nvidia.com/gpu.product' {dropin}")

    with subtest("the CDI spec was patched"):
        machine.succeed("grep -F 'nvidia_icd' ${root}/run/cdi/nvidia-container-toolkit.json")

    with subtest("the metrics textfile agrees"):
        machine.succeed("grep -E '^nodeprep_ready 1$' ${root}${textfileDir}/nodeprep.prom")
  '';
}
