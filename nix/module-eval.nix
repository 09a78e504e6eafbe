# checks.<system>.module-eval: evaluate a NixOS system built from `modules`
# (the flake passes nixosModules.default + example-configuration.nix),
# fail on any failed assertion, check how nodeprep.service is wired and
# that it composes with nixpkgs' own k3s and nvidia-container-toolkit
# modules as designed (the unit's arguments replayed exactly, the toolkit
# on k3s's PATH, the RuntimeClass on a server), and write what it saw to
# $out as JSON, with the fleet-check facts of the example (nix/facts.nix,
# the same facts lib.mkChecks gathers).
#
# Only evaluation happens: the system's toplevel derivation is instantiated
# (so every option of the whole configuration type-checks and the unit file
# renders) but not built, and $out has no store references.
{
  pkgs,
  nixosSystem,
  modules,
}:
let
  inherit (pkgs) lib;
  nplib = import ./lib.nix;
  sys = nixosSystem { inherit modules; };
  cfg = sys.config;

  # The same node as a k3s server with the options that reach the unit's
  # command line (nodeName, nodeIP, disable, a kubelet config, a token that
  # must not reach nodeprep).
  serverSys = nixosSystem {
    modules = modules ++ [
      {
        services.k3s = {
          role = lib.mkForce "server";
          serverAddr = lib.mkForce "";
          nodeName = "gpu-01";
          nodeIP = "10.0.0.5";
          disable = [ "traefik" ];
          agentTokenFile = "/run/secrets/agent-token";
          extraKubeletConfig.maxPods = 250;
          extraFlags = [ "--cluster-cidr 10.42.0.0/16" ];
        };
      }
    ];
  };
  server = serverSys.config;

  # nodeprep's --k3s-arg values, and the k3s unit's own arguments after the
  # binary without the secret flags: they must be equal.
  k3sArgsOf =
    c:
    map (lib.removePrefix "--k3s-arg=") (
      lib.filter (lib.hasPrefix "--k3s-arg=") (
        nplib.execWords (builtins.unsafeDiscardStringContext c.systemd.services.nodeprep.serviceConfig.ExecStart)
      )
    );
  unitArgsOf =
    c:
    let
      ws = builtins.tail (nplib.execWords (builtins.unsafeDiscardStringContext c.systemd.services.k3s.serviceConfig.ExecStart));
      secret = w: builtins.match "--(token|token-file|agent-token|agent-token-file)(=.*)?" w;
      drop =
        l:
        if l == [ ] then
          [ ]
        else if secret (builtins.head l) == null then
          [ (builtins.head l) ] ++ drop (builtins.tail l)
        else if builtins.elemAt (secret (builtins.head l)) 1 != null then
          drop (builtins.tail l)
        else
          drop (builtins.tail (builtins.tail l));
    in
    drop ws;
  toolsBin = "${lib.getOutput "tools" cfg.hardware.nvidia-container-toolkit.package}/bin";
  fleetFacts = import ./facts.nix {
    inherit lib;
    inherit (sys) pkgs;
    name = "example";
    config = cfg;
  };
  unit = cfg.systemd.services.nodeprep;
  sc = unit.serviceConfig;

  failedAssertions = map (a: a.message) (lib.filter (a: !a.assertion) cfg.assertions);

  # What the design says about the unit; each is { name; ok; }.
  expectations = [
    {
      name = "oneshot with RemainAfterExit";
      ok = sc.Type == "oneshot" && sc.RemainAfterExit;
    }
    {
      name = "after, requires and partOf the CDI generator";
      ok = lib.all (l: lib.elem "nvidia-container-toolkit-cdi-generator.service" l) [
        unit.after
        unit.requires
        unit.partOf
      ];
    }
    {
      name = "before and requiredBy k3s";
      ok = lib.elem "k3s.service" unit.before && lib.elem "k3s.service" unit.requiredBy;
    }
    {
      name = "ExecStart passes the loader, EGL, NVML and metrics flags";
      ok = lib.all (f: lib.hasInfix f sc.ExecStart) [
        "\"up\""
        "--config=/etc/nodeprep/config.yaml"
        "--vulkan-loader=/nix/store/"
        "--egl-lib=/nix/store/"
        "--nvml-lib=/run/opengl-driver/lib/libnvidia-ml.so.1"
        "--cuda-lib=/run/opengl-driver/lib/libcuda.so.1"
        "--metrics-file=/var/lib/prometheus-node-exporter/textfile/nodeprep.prom"
      ];
    }
    {
      name = "the k3s token never reaches nodeprep";
      ok = !(lib.hasInfix "token" sc.ExecStart) && !(lib.hasInfix "token" server.systemd.services.nodeprep.serviceConfig.ExecStart);
    }
    # --- composed with nixpkgs' k3s and toolkit modules (issue 31) ---
    {
      name = "nodeprep replays exactly the k3s unit's arguments, less its secrets (agent and server)";
      ok =
        k3sArgsOf cfg == unitArgsOf cfg
        && k3sArgsOf server == unitArgsOf server
        && lib.all (a: lib.elem a (k3sArgsOf server)) [
          "server"
          "--node-name=gpu-01"
          "--node-ip=10.0.0.5"
          "--disable=traefik"
          "--cluster-cidr"
        ]
        && lib.any (lib.hasPrefix "--kubelet-arg=config=/nix/store/") (k3sArgsOf server);
    }
    {
      name = "the toolkit's runtime binaries are on the k3s unit's PATH, and nodeprep's config names that PATH";
      ok =
        lib.hasPrefix "${toolsBin}:" cfg.systemd.services.k3s.environment.PATH
        && builtins.head fleetFacts.k3s.unitPath == toolsBin
        && lib.hasInfix (builtins.unsafeDiscardStringContext "  k3sUnitPath:\n    - \"${toolsBin}\"") (
          builtins.unsafeDiscardStringContext cfg.environment.etc."nodeprep/config.yaml".text
        );
    }
    {
      name = "a k3s server auto-deploys the nvidia-cdi RuntimeClass; the example agent does not";
      ok =
        server.services.k3s.manifests.nodeprep-nvidia-cdi-runtimeclass.content.handler == "nvidia-cdi"
        && !(cfg.services.k3s.manifests ? nodeprep-nvidia-cdi-runtimeclass);
    }
    {
      name = "ProtectSystem=strict with exactly the written directories";
      ok =
        sc.ProtectSystem == "strict"
        && sc.ReadWritePaths == [
          "/run/cdi"
          "/etc/rancher/k3s/config.yaml.d"
          "/run/nodeprep"
          "/var/lib/prometheus-node-exporter/textfile"
        ];
    }
    {
      name = "network-less, no new privileges, GPU devices only";
      ok =
        sc.PrivateNetwork
        && sc.NoNewPrivileges
        && sc.DevicePolicy == "closed"
        # /proc/devices names of current NVIDIA drivers (nv.c); the glob
        # catches the rest.
        && lib.all (d: lib.elem d sc.DeviceAllow) [
          "char-nvidia rw"
          "char-nvidiactl rw"
          "char-nvidia* rw"
        ]
        && lib.elem "char-drm rw" sc.DeviceAllow;
    }
    {
      name = "config.yaml has the taint and the policy";
      ok =
        lib.hasInfix "nvidia.com/gpu=present:NoSchedule" cfg.environment.etc."nodeprep/config.yaml".text
        && lib.hasInfix "onSelftestFailure: \"block\"" cfg.environment.etc."nodeprep/config.yaml".text;
    }
    {
      name = "tmpfiles make every ReadWritePaths directory";
      ok = lib.all (d: lib.elem "d ${d} 0755 root root -" cfg.systemd.tmpfiles.rules) sc.ReadWritePaths;
    }
    {
      name = "config.yaml names NVML, the Vulkan loader and libEGL (manual runs need no flags)";
      ok = lib.all (k: lib.hasInfix k cfg.environment.etc."nodeprep/config.yaml".text) [
        "library: \"/run/opengl-driver/lib/libnvidia-ml.so.1\""
        "cudaLib: \"/run/opengl-driver/lib/libcuda.so.1\""
        "vulkanLoader: \"/nix/store/"
        "eglLib: \"/nix/store/"
      ];
    }
    {
      name = "recovery: retried on failure, bounded, pulls k3s in; the generator pulls nodeprep in";
      ok =
        sc.Restart == "on-failure"
        && sc.RestartSec == "30s"
        && unit.startLimitBurst == 6
        && lib.elem "k3s.service" unit.wants
        && lib.elem "nodeprep.service" cfg.systemd.services."nvidia-container-toolkit-cdi-generator".wants
        && cfg.systemd.services."nvidia-container-toolkit-cdi-generator".serviceConfig.Restart == "on-failure";
    }
    # --- nodeprep health (services.nodeprep.health) ---
    {
      name = "a timer runs nodeprep health every 5min while nodeprep.service is active";
      ok =
        cfg.systemd.timers.nodeprep-health.timerConfig.OnUnitActiveSec == "5min"
        && lib.elem "nodeprep.service" cfg.systemd.services.nodeprep-health.requisite
        && lib.hasInfix "\"health\"" cfg.systemd.services.nodeprep-health.serviceConfig.ExecStart
        # It waits for the timer when the node is not ready, never restarts.
        && cfg.systemd.services.nodeprep-health.serviceConfig.Restart == "no"
        && !(cfg.systemd.services.nodeprep-health.serviceConfig ? RestartSec)
        && cfg.systemd.services.nodeprep-health.serviceConfig.ReadWritePaths == [
          "/run/nodeprep"
          "/var/lib/prometheus-node-exporter/textfile"
          "-/etc/cdi"
          "-/run/cdi"
        ];
    }
    {
      name = "the health unit reaches only loopback for the Node report, otherwise as hardened as nodeprep.service";
      ok =
        let
          h = cfg.systemd.services.nodeprep-health.serviceConfig;
        in
        !h.PrivateNetwork
        && h.IPAddressDeny == "any"
        && h.IPAddressAllow == [ "localhost" ]
        && h.RestrictAddressFamilies == [ "AF_UNIX" "AF_INET" "AF_INET6" ]
        && h.NoNewPrivileges
        && h.ProtectSystem == "strict"
        && h.CapabilityBoundingSet == [ "" ]
        && lib.hasInfix "--kubeconfig=/var/lib/rancher/k3s/agent/kubelet.kubeconfig" h.ExecStart;
    }
    # --- end nodeprep health ---
    # --- re-patch on write (services.nodeprep.repatch) ---
    {
      name = "a path unit over the CDI spec directories runs cdi patch after nodeprep.service";
      ok =
        cfg.systemd.paths.nodeprep-cdi-patch.pathConfig.PathChanged == [
          "/etc/cdi"
          "/run/cdi"
        ]
        && cfg.systemd.paths.nodeprep-cdi-patch.pathConfig.Unit == "nodeprep-cdi-patch.service"
        && lib.elem "multi-user.target" cfg.systemd.paths.nodeprep-cdi-patch.wantedBy
        && lib.elem "nodeprep.service" cfg.systemd.services.nodeprep-cdi-patch.requisite
        && lib.all (f: lib.hasInfix f cfg.systemd.services.nodeprep-cdi-patch.serviceConfig.ExecStart) [
          "\"cdi\" \"patch\""
          "--changes-only"
          "--wait=30s"
        ]
        && cfg.systemd.services.nodeprep-cdi-patch.serviceConfig.Restart == "no"
        && cfg.systemd.services.nodeprep-cdi-patch.serviceConfig.ProtectSystem == "strict"
        && lib.elem "-/run/cdi" cfg.systemd.services.nodeprep-cdi-patch.serviceConfig.ReadWritePaths
        && !(cfg.systemd.services.nodeprep-cdi-patch.serviceConfig ? DeviceAllow);
    }
    # --- end re-patch on write ---
  ];
  unmet = map (e: e.name) (lib.filter (e: !e.ok) expectations);

  # Instantiating toplevel evaluates everything (and the rendered unit).
  toplevel = builtins.unsafeDiscardStringContext cfg.system.build.toplevel.drvPath;
  unitText = builtins.unsafeDiscardStringContext cfg.systemd.units."nodeprep.service".text;
  pathUnitText = builtins.unsafeDiscardStringContext cfg.systemd.units."nodeprep-cdi-patch.path".text;

  facts = {
    inherit toplevel unitText pathUnitText;
    configYaml = cfg.environment.etc."nodeprep/config.yaml".text;
    inherit (unit)
      after
      requires
      partOf
      before
      requiredBy
      ;
    execStart = builtins.unsafeDiscardStringContext sc.ExecStart;
    readWritePaths = sc.ReadWritePaths;
    tmpfiles = cfg.systemd.tmpfiles.rules;
    # What lib.mkChecks would hand nodeprep for this node.
    fleetFacts = builtins.fromJSON (builtins.unsafeDiscardStringContext (builtins.toJSON fleetFacts));
  };
in
if failedAssertions != [ ] then
  throw "module-eval: failed assertions:\n- ${lib.concatStringsSep "\n- " failedAssertions}"
else if unmet != [ ] then
  throw "module-eval: nodeprep.service: ${lib.concatStringsSep "; " unmet}"
else
  pkgs.writeText "nodeprep-module-eval.json" (builtins.toJSON facts)
