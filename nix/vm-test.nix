# checks.<system>.vm: a NixOS VM (no GPU) runs `nodeprep up` the way the
# unit does — the same config file and command line, built by ./lib.nix —
# against a copy of testdata/hosts/nixos-h200 with a simulated DGX H200, and
# Mesa's lavapipe and EGL standing in for the NVIDIA driver. Then it checks
# the verdict, the drop-in and the metrics file.
#
# The second node, `recovery`, runs the module itself, with stand-ins for
# what needs a real driver: nixpkgs' hardware.nvidia-container-toolkit module
# is replaced by a stub whose generator fails its first run ("driver not
# loaded yet") and then writes the spec, and k3s's ExecStart by a sleep
# that first checks nodeprep's drop-in. It proves the recovery the module
# promises (docs/nixos-module.md, "Recovery"): the generator is retried, the
# start jobs of nodeprep and k3s wait for it instead of failing, and k3s
# ends up running with the drop-in, with nobody touching the machine.
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
    # Replayed as the agent's unit passes it (--k3s-arg=agent, then
    # --node-ip and its value as two words). (A server flag such as
    # --disable would stop a k3s agent, and nodeprep with it.)
    k3sExtraFlags = [ "--node-ip 10.0.2.15" ];
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

  # The recovery node's host tree: not under /tmp (nodeprep.service has
  # PrivateTmp=true and would see an empty /tmp).
  recoveryRoot = "/var/lib/nodeprep-root";
  generatorUnit = "nvidia-container-toolkit-cdi-generator.service";
  failedOnceFlag = "/var/lib/generator-failed-once";

  # Stands in for nixpkgs' hardware.nvidia-container-toolkit module: the
  # option services.nodeprep asserts on, and a generator (nixpkgs' is a
  # oneshot with RemainAfterExit and RuntimeDirectory=cdi too) whose first
  # run fails like one that started before the driver was loaded.
  toolkitStub =
    { lib, ... }:
    {
      disabledModules = [ "services/hardware/nvidia-container-toolkit" ];
      options.hardware.nvidia-container-toolkit.enable = lib.mkEnableOption "the CDI generator stand-in";
      config.systemd.services.nvidia-container-toolkit-cdi-generator = {
        wantedBy = [ "multi-user.target" ];
        serviceConfig = {
          Type = "oneshot";
          RemainAfterExit = true;
          RuntimeDirectory = "cdi";
        };
        script = ''
          if [ ! -e ${failedOnceFlag} ]; then
            touch ${failedOnceFlag}
            echo "stand-in generator: NVML: driver not loaded yet" >&2
            exit 1
          fi
          install -D -m 0644 ${hostTree}/run/cdi/nvidia-container-toolkit.json ${recoveryRoot}/run/cdi/nvidia-container-toolkit.json
        '';
      };
    };
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

  nodes.recovery =
    { lib, ... }:
    {
      imports = [
        ./module.nix
        toolkitStub
      ];
      hardware.graphics.enable = true;
      hardware.nvidia-container-toolkit.enable = true;
      virtualisation.memorySize = 2048;
      virtualisation.cores = 2;
      environment.systemPackages = [ pkgs.jq ];

      services.nodeprep = {
        enable = true;
        package = nodeprep;
        labels = [ "node.example.com/pool=recovery" ];
        # The tree under --root has its glvnd set in its driver root; the
        # module's default (<libglvnd>/lib, a host path) is not under it.
        settings.cdi.glvndDirs = [ ];
        extraArgs = [
          "--root=${recoveryRoot}"
          "--simulate=dgx-h200"
          "--allow-cpu-adapter"
        ];
      };
      # What the self-test loads instead of the NVIDIA driver, and the tree
      # nodeprep works on (under --root; ProtectSystem=strict otherwise).
      systemd.services.nodeprep = {
        environment = {
          VK_DRIVER_FILES = lavapipe;
          __EGL_VENDOR_LIBRARY_FILENAMES = mesaEGL;
          LD_LIBRARY_PATH = "${pkgs.mesa}/lib";
        };
        serviceConfig.ReadWritePaths = [ recoveryRoot ];
      };
      systemd.services.nodeprep-test-root = {
        wantedBy = [ "multi-user.target" ];
        before = [ generatorUnit ];
        requiredBy = [ generatorUnit ];
        serviceConfig = {
          Type = "oneshot";
          RemainAfterExit = true;
        };
        script = ''
          rm -rf ${recoveryRoot}
          cp -a ${hostTree} ${recoveryRoot}
          chmod -R u+w ${recoveryRoot}
          rm -f ${recoveryRoot}/run/cdi/nvidia-container-toolkit.json
          mkdir -p ${recoveryRoot}/etc/rancher/k3s/config.yaml.d ${recoveryRoot}/run/nodeprep
        '';
      };

      # The real k3s unit (its Requires=nodeprep.service comes from the
      # module's requiredBy) with a stand-in process: it starts only when
      # nodeprep's drop-in is there.
      services.k3s = {
        enable = true;
        role = "agent";
        serverAddr = "https://k3s.invalid:6443";
        token = "not-a-secret";
      };
      systemd.services.k3s.serviceConfig = {
        Type = lib.mkForce "simple";
        ExecStartPre = lib.mkForce "${pkgs.coreutils}/bin/test -s ${recoveryRoot}/etc/rancher/k3s/config.yaml.d/50-nodeprep.yaml";
        ExecStart = lib.mkForce "${pkgs.coreutils}/bin/sleep infinity";
      };
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

    with subtest("recovery: the generator fails its boot run, then succeeds; k3s ends up running"):
        # Boot: the generator fails (auto-restart in 10 s); nodeprep's and
        # k3s's start jobs wait for it instead of failing.
        recovery.wait_for_unit("k3s.service", timeout=600)
        recovery.succeed("journalctl -b -u ${generatorUnit} | grep -F 'driver not loaded yet'")
        restarts = recovery.succeed("systemctl show -p NRestarts --value ${generatorUnit}").strip()
        assert restarts == "1", f"generator restarts: {restarts}, want 1"
        recovery.succeed("systemctl is-active nodeprep.service")
        dropin = "${recoveryRoot}/etc/rancher/k3s/config.yaml.d/50-nodeprep.yaml"
        recovery.succeed(f"grep -F 'nvidia.com/gpu=present:NoSchedule' {dropin}")
        recovery.succeed(f"grep -F 'node.example.com/pool=recovery' {dropin}")
        recovery.succeed("jq -e '.ready == true' ${recoveryRoot}/run/nodeprep/status.json")

    with subtest("recovery: a generator started again later pulls nodeprep and k3s back in"):
        # As after a boot whose generator gave up: everything down and
        # failed, then udev (here: systemctl) starts the generator again.
        recovery.succeed("rm -f ${recoveryRoot}/etc/rancher/k3s/config.yaml.d/50-nodeprep.yaml")
        recovery.succeed("systemctl stop ${generatorUnit}")
        recovery.fail("systemctl is-active k3s.service")
        recovery.succeed("systemctl start ${generatorUnit}")
        recovery.wait_for_unit("k3s.service", timeout=300)
        recovery.succeed("test -s ${recoveryRoot}/etc/rancher/k3s/config.yaml.d/50-nodeprep.yaml")
  '';
}
