# NixOS module: services.nodeprep.
#
# Runs `nodeprep up` at every boot, between the NVIDIA CDI generator and
# k3s: inspect the GPUs (NVML), patch the generated CDI spec with the
# Vulkan/EGL/glvnd mounts NixOS keeps under /run/opengl-driver, prove Vulkan
# and EGL work, write the k3s agent drop-in with the node's labels and
# taints, and only then let k3s start. A node whose GPUs cannot render never
# joins (policy "block"), or joins tainted (policy "taint").
#
# The logic (config rendering, the command line, the writable paths) is in
# ./lib.nix, which needs no nixpkgs and is tested by ./tests.nix.
#
# CDI and k3s: k3s's embedded containerd (1.7+, k3s 1.29+) reads CDI specs
# from /etc/cdi and /var/run/cdi by default (enable_cdi is on), so the spec
# nodeprep patches is what the NVIDIA device plugin's CDI mode
# (deviceListStrategy=cdi-cri) hands to containers; no containerd template
# is needed. With `virtualisation.containerd` instead of k3s's embedded one,
# set `virtualisation.containerd.settings.plugins."io.containerd.grpc.v1.cri"
# .enable_cdi = true` and `cdi_spec_dirs = [ "/etc/cdi" "/var/run/cdi" ]`.
{
  config,
  lib,
  pkgs,
  options,
  ...
}:
let
  cfg = config.services.nodeprep;
  nplib = import ./lib.nix;

  generator = "nvidia-container-toolkit-cdi-generator.service";

  # services.k3s may be absent (a module set without k3s) or older (no
  # nodeLabel/nodeTaint options, extraFlags a string): read it defensively.
  k3s = config.services.k3s or { };
  k3sConfigPath = k3s.configPath or null;
  # The k3s unit as nixpkgs' k3s module makes it (its ExecStart and PATH).
  k3sService = config.systemd.services.k3s or { };
  k3sRole = k3s.role or "agent";
  k3sDataDir = nplib.k3sDataDirOf opts;

  # The toolkit's runtime binaries (nvidia-container-runtime and
  # nvidia-container-runtime.cdi), in the package's "tools" output, as
  # hardware.nvidia-container-toolkit uses them
  # (nixos/modules/services/hardware/nvidia-container-toolkit/default.nix:
  # lib.getOutput "tools" ...package for docker's runtimes.nvidia;
  # pkgs/by-name/nv/nvidia-container-toolkit/package.nix moves them there).
  toolkitPackage = config.hardware.nvidia-container-toolkit.package or pkgs.nvidia-container-toolkit;
  toolkitTools = lib.getOutput "tools" toolkitPackage;

  # The RuntimeClass whose handler k3s registers when it finds
  # nvidia-container-runtime.cdi (k3s PR #11065): what GPU pods nodeprep
  # renders run with (runtimeClassName: nvidia-cdi).
  runtimeClass = {
    apiVersion = "node.k8s.io/v1";
    kind = "RuntimeClass";
    metadata.name = "nvidia-cdi";
    handler = "nvidia-cdi";
  };
  runtimeClassName = "nodeprep-nvidia-cdi-runtimeclass";
  wantRuntimeClass = cfg.k3s.runtimeClass && k3sRole == "server";
  # services.k3s.manifests (nixpkgs 24.11 and later) links its files into
  # /var/lib/rancher/k3s/server/manifests whatever the data-dir; with
  # another data-dir, or a nixpkgs without the option, a tmpfiles rule links
  # the manifest where k3s reads it (<data-dir>/server/manifests), as the
  # k3s module's own tmpfiles rules do.
  k3sHasManifests = (options.services or { }) ? k3s && options.services.k3s ? manifests;
  useK3sManifests = k3sHasManifests && k3sDataDir == nplib.defaults.k3sDataDir;
  runtimeClassFile = pkgs.writeText "${runtimeClassName}.yaml" (builtins.toJSON runtimeClass);

  # hardware.nvidia.datacenter.enable: nixpkgs then links none of the
  # driver's libraries under /run/opengl-driver (see the assertion).
  datacenter = config.hardware.nvidia.datacenter.enable or false;
  hasSetting = path: lib.hasAttrByPath path cfg.settings;

  # The glvnd dispatch set (libEGL.so.1, …) is in /run/opengl-driver/lib
  # only when a libglvnd package is among hardware.graphics' packages; it
  # usually is not, so nodeprep takes the set from the libglvnd option.
  graphicsPackages = lib.filter (p: p != null) (
    [ (config.hardware.graphics.package or null) ] ++ (config.hardware.graphics.extraPackages or [ ])
  );
  driverRootHasGlvnd = lib.any (p: lib.getName p == "libglvnd") graphicsPackages;

  # Everything lib.nix takes, from the options.
  opts = {
    inherit (cfg)
      settings
      taints
      labels
      onSelftestFailure
      extraArgs
      ;
    metricsTextfileDir = if cfg.metrics.textfileDir == null then null else toString cfg.metrics.textfileDir;
    k3sConfigPath = if k3sConfigPath == null then null else toString k3sConfigPath;
    # Read by nodeprep at boot (join.k3sEnvironmentFile); unknowable here.
    k3sEnvironmentFile = if (k3s.environmentFile or null) == null then null else toString k3s.environmentFile;
    glvndDir = if driverRootHasGlvnd then null else "${lib.getLib cfg.libglvnd}/lib";
    k3sExtraFlags = k3s.extraFlags or [ ];
    k3sNodeLabels = k3s.nodeLabel or [ ];
    k3sNodeTaints = k3s.nodeTaint or [ ];
    inherit k3sRole;
    # The rest of what the k3s unit passes (serverAddr, disable, nodeName,
    # nodeIP, selinux, the kubelet config file, ...), for the k3s arguments
    # nodeprep replays: exactly the unit's, less its secrets.
    k3sUnit = nplib.k3sUnitOf k3s (k3sService.serviceConfig.ExecStart or null);
    # Where k3s looks for the NVIDIA runtimes: its unit's PATH.
    k3sUnitPath =
      if k3sService ? path then
        nplib.unitPathOf (p: if builtins.isString p then p else lib.getBin p) k3sService.path
      else
        null;
    vulkanLoader = "${lib.getLib cfg.vulkanLoader}/lib/libvulkan.so.1";
    eglLib = "${lib.getLib cfg.libglvnd}/lib/libEGL.so.1";
    nvmlLib = "${pkgs.addDriverRunpath.driverLink}/lib/libnvidia-ml.so.1";
    cudaLib = "${pkgs.addDriverRunpath.driverLink}/lib/libcuda.so.1";
    configFile = "/etc/nodeprep/config.yaml";
    nodeReport = cfg.health.reportToNode;
    nodeKubeconfig = cfg.health.kubeconfig;
  };

  settingsFormat = pkgs.formats.json { };

  # A service that runs one nodeprep command on a node nodeprep.service
  # brought up (health, the re-patch): ordered after it and run only while
  # it is active (Requisite=), with its hardening but not its retry policy
  # (a run that fails exits non-zero and waits for its next trigger, not a
  # restart every 30 s), and its own command line and writable paths.
  # `without` names more of nodeprep.service's settings the unit leaves
  # out; `serviceConfig` goes over the rest.
  followerService =
    {
      description,
      execArgs,
      readWritePaths,
      without ? [ ],
      serviceConfig ? { },
    }:
    {
      inherit description;
      documentation = [ "https://github.com/nodeprep/nodeprep" ];
      after = [ "nodeprep.service" ];
      requisite = [ "nodeprep.service" ];
      serviceConfig =
        (removeAttrs config.systemd.services.nodeprep.serviceConfig (
          [
            "Restart"
            "RestartSec"
            "RestartPreventExitStatus"
          ]
          ++ without
        ))
        // {
          Restart = "no";
          Type = "oneshot";
          RemainAfterExit = false;
          ExecStart = nplib.escapeSystemdExecArgs ([ (lib.getExe cfg.package) ] ++ execArgs);
          ReadWritePaths = readWritePaths;
        }
        // serviceConfig;
    };
in
{
  options.services.nodeprep = {
    enable = lib.mkEnableOption ''
      nodeprep, which prepares this machine's NVIDIA GPUs for k3s at every
      boot (CDI patch, Vulkan/EGL self-test, k3s labels and taints) and
      keeps k3s from starting when they are not usable'';

    package = lib.mkOption {
      type = lib.types.package;
      # go.mod's go directive is the oldest Go that builds nodeprep, and
      # buildGoModule builds with GOTOOLCHAIN=local: nixpkgs' builder when
      # its Go is new enough, else the newest buildGo1NNModule that is
      # (nplib.chooseGo, the same choice as the flake's packages.default);
      # without one, evaluation stops saying so.
      default = pkgs.callPackage ./package.nix {
        buildGoModule = (nplib.goBuilderOf pkgs).builder;
      };
      defaultText = lib.literalExpression "pkgs.callPackage ./nix/package.nix { buildGoModule = <pkgs.buildGoModule if its Go >= ${nplib.goMinimum}, else the newest pkgs.buildGo1NNModule >= ${nplib.goMinimum}>; }";
      description = "The nodeprep package (the flake's nixosModules.default sets its own build).";
    };

    vulkanLoader = lib.mkPackageOption pkgs "vulkan-loader" {
      extraDescription = "The self-test loads its libvulkan.so.1 (`--vulkan-loader`); the ICDs come from /run/opengl-driver.";
    };

    libglvnd = lib.mkPackageOption pkgs "libglvnd" {
      extraDescription = "The self-test loads its libEGL.so.1 (`--egl-lib`).";
    };

    taints = lib.mkOption {
      type = lib.types.listOf lib.types.str;
      default = [ nplib.defaults.defaultTaint ];
      example = [
        "nvidia.com/gpu=present:NoSchedule"
        "dedicated=render:NoExecute"
      ];
      description = ''
        The node's taints, `key[=value]:Effect`, registered with the node
        (k3s `node-taint`). This is the complete list: the default taint is
        only there while it is in the list. Taints reach a Node only when it
        first registers.
      '';
    };

    labels = lib.mkOption {
      type = lib.types.listOf lib.types.str;
      default = [ ];
      example = [ "pool=render" ];
      description = ''
        Extra node labels, `key=value`, added to the ones nodeprep derives
        from the GPU inventory (GPU Feature Discovery's `nvidia.com/...`).
      '';
    };

    onSelftestFailure = lib.mkOption {
      type = lib.types.enum [
        "block"
        "taint"
      ];
      default = "block";
      description = ''
        What a failed Vulkan/EGL self-test does. `block`: the unit fails
        and k3s (which requires it) does not start. `taint`: the node joins
        with the extra taint `nodeprep.dev/gpu-unhealthy=true:NoExecute`.
      '';
    };

    metrics.textfileDir = lib.mkOption {
      type = lib.types.nullOr lib.types.path;
      default = null;
      example = "/var/lib/prometheus-node-exporter/textfile";
      description = ''
        Directory of node_exporter's textfile collector; when set, nodeprep
        writes `nodeprep.prom` there (`nodeprep_ready`, `nodeprep_gpus`,
        stage durations, ...). Point
        `services.prometheus.exporters.node.extraFlags` at it with
        `--collector.textfile.directory=<dir>`.
      '';
    };

    settings = lib.mkOption {
      type = settingsFormat.type;
      default = { };
      example = lib.literalExpression ''
        {
          cdi.deviceNames = [ "uuid" "index" ];
          join.gfdLabels = false; # GPU Feature Discovery runs in the cluster
          selftest.timeout = "45s";
          wait = "30s";
        }
      '';
      description = ''
        The rest of /etc/nodeprep/config.yaml (sections `cdi`, `nvml`,
        `join`, `selftest`, `up`, `cluster`, `wait`; unknown keys are rejected by
        nodeprep). Durations are strings such as `"30s"`. Keys that typed
        options own (`join.taints`, `join.labels`, `join.defaultTaint`,
        `up.onSelftestFailure`, and `up.metricsFile` when
        `metrics.textfileDir` is set) may not be set here.
      '';
    };

    extraArgs = lib.mkOption {
      type = lib.types.listOf lib.types.str;
      default = [ ];
      example = [ "--verbose" ];
      description = "Extra arguments of `nodeprep up` in the unit.";
    };

    # --- nodeprep health: options (see the health block in config) ---
    health = {
      enable = lib.mkOption {
        type = lib.types.bool;
        default = true;
        description = ''
          Re-check the GPUs periodically with `nodeprep health` (inventory, the
          CDI specs of the runtime's view re-patched and judged, self-test; no
          join), rewriting the status file and the
          metrics textfile so that `nodeprep_ready` turns 0 within one interval
          when a GPU falls off or fails its dispatch.
        '';
      };
      interval = lib.mkOption {
        type = lib.types.str;
        default = "5min";
        example = "1min";
        description = ''
          How often `nodeprep health` runs (a systemd time span). A run is
          skipped while `nodeprep up` or a self-test holds the lock. `nodeprep
          cluster render --health-interval` should get the same value: its
          KEDA trigger treats a node silent for three intervals as down.
        '';
      };
      reportToNode = lib.mkOption {
        type = lib.types.bool;
        default = true;
        description = ''
          Let `nodeprep health` set the node condition `GPUUnhealthy` and the
          label `nodeprep.dev/gpu-ready=true|false` on this node's Node, with
          the kubelet's own credential (`kubeconfig`), so that the scheduler
          stops sending GPU pods to a node whose GPUs broke after boot
          (docs/cluster.md). The health unit then may reach the API server on
          loopback (k3s's agent load balancer 127.0.0.1:6444, a server's
          127.0.0.1:6443) and `apiServerAddresses`, nothing else.
        '';
      };
      kubeconfig = lib.mkOption {
        type = lib.types.str;
        default = "${k3sDataDir}/agent/kubelet.kubeconfig";
        defaultText = lib.literalExpression ''"<data-dir>/agent/kubelet.kubeconfig"'';
        description = ''
          The kubelet's kubeconfig that k3s writes under its data-dir
          (`<data-dir>/agent/kubelet.kubeconfig`). The data-dir is the one
          the k3s unit passes (`--data-dir`/`-d` in `services.k3s.extraFlags`),
          else `/var/lib/rancher/k3s`; set this when a k3s config file or
          `K3S_DATA_DIR` moves it.
        '';
      };
      apiServerAddresses = lib.mkOption {
        type = lib.types.listOf lib.types.str;
        default = [ ];
        example = [ "10.0.0.10/32" ];
        description = ''
          Addresses (IPAddressAllow= syntax) besides loopback that the health
          unit may connect to: only needed when the kubeconfig names a
          remote API server instead of k3s's local load balancer.
        '';
      };
    };
    # --- end nodeprep health options ---

    k3s = {
      toolkitOnPath = lib.mkOption {
        type = lib.types.bool;
        default = true;
        description = ''
          Put the NVIDIA Container Toolkit's runtime binaries
          (`nvidia-container-runtime`, `nvidia-container-runtime.cdi`, the
          `tools` output of `hardware.nvidia-container-toolkit.package`) on
          the k3s unit's PATH. k3s looks the NVIDIA runtimes up on its own
          PATH when it renders containerd's config and registers the
          `nvidia` and `nvidia-cdi` runtime handlers only for those it
          finds; NixOS's k3s unit has neither on its PATH, so without this
          no GPU pod can run with `runtimeClassName: nvidia-cdi`.
        '';
      };
      runtimeClass = lib.mkOption {
        type = lib.types.bool;
        default = true;
        description = ''
          On a k3s server (`services.k3s.role = "server"`), deploy the
          `nvidia-cdi` RuntimeClass (node.k8s.io/v1, handler `nvidia-cdi`)
          as a k3s auto-deployed manifest (`services.k3s.manifests`, or a
          link in `<data-dir>/server/manifests`). Agents deploy nothing.
        '';
      };
    };

    derived = lib.mkOption {
      type = lib.types.attrs;
      internal = true;
      readOnly = true;
      description = ''
        What the module derives from services.k3s for nodeprep, as nodeprep
        gets it (read by the flake's lib.mkChecks, nix/facts.nix): the k3s
        unit's arguments, data-dir, config file, PATH directories, kubelet
        configuration, and the manifests it links itself.
      '';
    };

    repatch.enable = lib.mkOption {
      type = lib.types.bool;
      default = true;
      description = ''
        Re-patch the CDI specs whenever one is written after boot (a systemd
        path unit over the runtime's CDI spec directories runs
        `nodeprep cdi patch`): the NVIDIA device plugin and the DRA driver
        write theirs without the graphics mounts. The status file and the
        metrics follow, so `nodeprep_ready` turns 0 naming the spec when one
        that serves GPUs cannot be patched. The directories are
        `settings.cdi.specDirs` (default /etc/cdi and /var/run/cdi); set it
        when a containerd template changes `cdi_spec_dirs`.
      '';
    };
  };

  config = lib.mkIf cfg.enable {
    warnings = lib.optional (opts.k3sEnvironmentFile != null) ''
      services.k3s.environmentFile (${opts.k3sEnvironmentFile}) cannot be read at build time:
      nodeprep reads it at boot (join.k3sEnvironmentFile) for K3S_CONFIG_FILE and K3S_DATA_DIR.
      If it sets K3S_CONFIG_FILE, set services.k3s.configPath to the same file too, or the
      unit's ReadWritePaths (${nplib.k3sConfigOf opts}.d) will not cover the drop-in directory.'';

    assertions = [
      {
        assertion = k3s.enable or false;
        message = ''
          services.nodeprep needs services.k3s.enable = true: nodeprep.service is
          RequiredBy=k3s.service and writes k3s's drop-in; without k3s the unit would
          name a missing unit.'';
      }
      {
        # This module adds to the generator's unit (recovery below), so the
        # attribute alone proves nothing: nixpkgs' unit has an ExecStart.
        assertion =
          let
            u = config.systemd.services."nvidia-container-toolkit-cdi-generator" or { };
          in
          (u.serviceConfig.ExecStart or null) != null || (u.script or "") != "";
        message = ''
          services.nodeprep needs ${generator}, which this nixpkgs does not define
          (hardware.nvidia-container-toolkit.enable = true defines it, in nixpkgs with that module):
          nodeprep patches the spec it writes and is ordered after it.'';
      }
      {
        # The working alternative: name a driver tree and NVML explicitly.
        assertion =
          !datacenter
          || config.hardware.graphics.enable
          || (hasSetting [ "cdi" "driverRoot" ] && hasSetting [ "nvml" "library" ]);
        message = ''
          hardware.nvidia.datacenter.enable = true without hardware.graphics.enable: in
          datacenter mode nixpkgs does not turn hardware.graphics on, so nothing links the
          driver's libraries (libnvidia-ml, the Vulkan ICD, the EGL vendor file) under
          /run/opengl-driver, where nodeprep and the CDI generator look. Either set
          hardware.graphics.enable = true (the driver's userspace is then in
          /run/opengl-driver), or set both services.nodeprep.settings.cdi.driverRoot (a
          directory with the driver's share/vulkan/icd.d, share/glvnd/egl_vendor.d and lib)
          and services.nodeprep.settings.nvml.library (its libnvidia-ml.so.1).'';
      }
      {
        assertion = nplib.entryProblems opts == [ ];
        message = ''
          services.nodeprep / services.k3s node labels or taints the kubelet would refuse
          (k3s would not start at the next boot):
            ${lib.concatStringsSep "\n  " (nplib.entryProblems opts)}'';
      }
      {
        assertion = nplib.kubeletArgConflicts opts == [ ];
        message = ''
          services.k3s.extraFlags passes ${lib.concatStringsSep " " (nplib.kubeletArgConflicts opts)}.
          k3s passes kubelet-args after its own flags: register-with-taints replaces the
          --register-with-taints k3s builds from node-taint (the kubelet keeps the last one),
          and a plain node-labels replaces its --node-labels, so the node would register
          without nodeprep's taints or labels. Combine them: move those taints to
          services.nodeprep.taints (node-taint+ in the drop-in) and write labels as
          node-labels+=..., or set services.nodeprep.settings.join.allowOverride = true.'';
      }
      {
        assertion = config.hardware.nvidia-container-toolkit.enable or false;
        message = ''
          services.nodeprep needs hardware.nvidia-container-toolkit.enable = true:
          nodeprep patches the CDI spec that nvidia-container-toolkit-cdi-generator.service
          writes to /var/run/cdi, and its unit is ordered after that service.'';
      }
      {
        assertion = nplib.conflicts opts == [ ];
        message = ''
          services.nodeprep.settings sets ${lib.concatStringsSep ", " (nplib.conflicts opts)},
          which typed options own (services.nodeprep.taints, labels, onSelftestFailure,
          metrics.textfileDir, services.k3s.configPath): set those instead.'';
      }
      {
        assertion = nplib.k3sNodeArgConflicts opts == [ ];
        message = ''
          services.k3s passes ${lib.concatStringsSep " " (nplib.k3sNodeArgConflicts opts)} to k3s.
          k3s adds command-line node labels and taints to the ones nodeprep writes to
          config.yaml.d, after them: a label with one of nodeprep's keys overrides nodeprep's,
          and a taint with the key and effect of one of nodeprep's makes the API server refuse
          the node, so `nodeprep up` would refuse to run. Drop them from services.k3s, or keep
          each in one place: services.nodeprep.labels / services.nodeprep.taints (a label
          override is accepted with services.nodeprep.settings.join.allowOverride = true).'';
      }
      {
        # A path literal (./k3s.yaml) is copied to the store by the k3s unit.
        assertion =
          k3sConfigPath == null
          || !(builtins.isPath k3sConfigPath || lib.hasPrefix builtins.storeDir (toString k3sConfigPath));
        message = ''
          services.k3s.configPath is in the Nix store, so its drop-in directory
          (<configPath>.d) is read-only and nodeprep cannot write its k3s drop-in.
          Put the k3s config under /etc (environment.etc."rancher/k3s/config.yaml")
          and leave services.k3s.configPath unset.'';
      }
    ];

    # `nodeprep` for manual runs (`nodeprep inspect`, `nodeprep cdi check`);
    # `systemctl cat nodeprep` shows the unit's exact `up` command line.
    environment.systemPackages = [ cfg.package ];

    environment.etc."nodeprep/config.yaml".text = nplib.renderConfig opts;

    services.nodeprep.derived = {
      k3sArgs = nplib.k3sReplayArgs opts;
      k3sDataDir = k3sDataDir;
      k3sConfig = nplib.k3sConfigOf opts;
      k3sUnitPath = opts.k3sUnitPath;
      kubeletConfig = opts.k3sUnit.kubeletConfig;
      # Manifests this module links into <data-dir>/server/manifests itself
      # (those in services.k3s.manifests are read from there).
      manifests = lib.optionalAttrs (wantRuntimeClass && !useK3sManifests) {
        "${runtimeClassName}.yaml" = runtimeClass;
      };
    };

    # The nvidia-cdi RuntimeClass on a server, through services.k3s.manifests
    # where this nixpkgs has it (see useK3sManifests; a tmpfiles link below
    # otherwise). Defined only where the option exists.
    services.k3s = lib.optionalAttrs k3sHasManifests {
      manifests.${runtimeClassName} = lib.mkIf (wantRuntimeClass && useK3sManifests) {
        content = runtimeClass;
      };
    };

    # The writable directories must exist before the unit starts
    # (ReadWritePaths= fails on a missing path); /run/cdi is the generator's.
    systemd.tmpfiles.rules =
      nplib.tmpfilesRules opts
      ++ lib.optional (wantRuntimeClass && !useK3sManifests) "L+ ${k3sDataDir}/server/manifests/${runtimeClassName}.yaml - - - - ${runtimeClassFile}";

    # k3s finds the NVIDIA runtimes on its own PATH (k3s
    # pkg/agent/containerd/nvidia.go: exec.LookPath, then
    # /usr/local/nvidia/toolkit; older releases look only in
    # /usr/local/nvidia/toolkit and /usr/bin), and registers a runtime
    # handler for each it finds: nvidia (nvidia-container-runtime) and
    # nvidia-cdi (nvidia-container-runtime.cdi, k3s PR #11065). NixOS's k3s
    # unit has neither on its PATH; the toolkit's tools output puts both
    # there. nodeprep gets the same PATH (config.yaml join.k3sUnitPath) to
    # predict the handlers before k3s has rendered its config.
    systemd.services.k3s.path = lib.mkIf cfg.k3s.toolkitOnPath [ toolkitTools ];

    # Recovery, the generator's half: its boot run fails when the driver is
    # not loaded yet. Retried (Restart=on-failure; mkDefault, nixpkgs' unit
    # sets none), its pending retry keeps the start jobs of nodeprep and
    # k3s waiting instead of failing them. And whenever it is started again
    # (a retry, udev's restart once the device appears, by hand), Wants=
    # pulls nodeprep in, which pulls k3s in: PartOf= alone restarts nodeprep
    # only while it is active, never after a failed boot.
    systemd.services."nvidia-container-toolkit-cdi-generator" = {
      wants = [ "nodeprep.service" ];
      startLimitIntervalSec = lib.mkDefault 600;
      startLimitBurst = lib.mkDefault 10;
      serviceConfig = {
        Restart = lib.mkDefault "on-failure";
        RestartSec = lib.mkDefault "10s";
      };
    };

    systemd.services.nodeprep = {
      description = "Prepare NVIDIA GPUs for k3s (CDI patch, Vulkan/EGL self-test, join config)";
      documentation = [ "https://github.com/nodeprep/nodeprep" ];

      # The generator writes /run/cdi/nvidia-container-toolkit.json; its
      # RuntimeDirectory=cdi is wiped whenever it stops or restarts (udev
      # restarts it when the nvidia device appears), taking our patch with
      # it. PartOf= propagates that stop/restart to nodeprep, which then
      # runs again after the generator and re-patches the fresh spec.
      after = [ generator ];
      requires = [ generator ];
      partOf = [ generator ];

      # k3s starts only after a successful run, and only if it succeeded:
      # requiredBy adds Requires=nodeprep.service to k3s.service. A failed
      # run (or a failed re-run after the generator restarts) stops k3s; the
      # node goes NotReady and its pods are rescheduled elsewhere.
      before = [ "k3s.service" ];
      requiredBy = [ "k3s.service" ];
      wantedBy = [ "multi-user.target" ];

      # Recovery without a person (docs/nixos-module.md, "Recovery"):
      # - a failed run is retried (Restart=on-failure below). While a retry
      #   is pending, systemd keeps this unit's start job open (the unit is
      #   "activating (auto-restart)", not failed), so k3s's start job,
      #   ordered after it, waits instead of failing; if a retry succeeds,
      #   k3s starts. Only when the start limit is hit does the job fail,
      #   and k3s's with it ("Dependency failed").
      # - every start of this unit (a retry, a start pulled in by the
      #   generator below, `systemctl start`) pulls k3s in with Wants=, so a
      #   k3s whose start job already failed is started again once nodeprep
      #   succeeds; After= keeps the order, Requires= (from requiredBy) the
      #   "only if it succeeded".
      wants = [ "k3s.service" ];
      startLimitIntervalSec = 900;
      startLimitBurst = 6;

      # A new config is a new run (on `nixos-rebuild switch`).
      restartTriggers = [ config.environment.etc."nodeprep/config.yaml".source ];

      # Nothing secret: the environment is empty, and the command line
      # carries the k3s unit's arguments without its secret flags (the
      # token, token file and agent token are left out, value and all).
      serviceConfig = {
        # oneshot + RemainAfterExit: "active" means "this boot's GPUs were
        # checked and the drop-in written"; k3s's Requires= holds on to
        # that. nodeprep still speaks sd_notify: NotifyAccess=main makes
        # systemd pass NOTIFY_SOCKET, so its STATUS= lines show in
        # `systemctl status nodeprep`; READY=1 is ignored for oneshot units
        # (harmless) — completion is the process's exit. Type=notify would
        # make READY=1 the start signal but mixes poorly with
        # RemainAfterExit and a non-zero exit as the "block" verdict.
        Type = "oneshot";
        RemainAfterExit = true;
        NotifyAccess = "main";
        ExecStart = nplib.escapeSystemdExecArgs ([ (lib.getExe cfg.package) ] ++ nplib.execArgs opts);
        # The self-test bounds each probe (selftest.timeout, 30s); oneshot
        # units have no start timeout by default.
        TimeoutStartSec = "5min";
        UMask = "0022";
        # Retried 30 s after a failure (driver still loading, GPU still
        # initialising), at most startLimitBurst starts in
        # startLimitIntervalSec; exit 2 (usage) and 65 (malformed config or
        # input) cannot get better by waiting and are not retried.
        # Type=oneshot allows Restart=on-failure (not always/on-success).
        Restart = "on-failure";
        RestartSec = "30s";
        RestartPreventExitStatus = [
          2
          65
        ];

        # --- hardening -------------------------------------------------
        # Writes exactly: /run/cdi (spec), <k3s config>.d (drop-in),
        # /run/nodeprep (status, lock) and the metrics directory.
        ProtectSystem = "strict";
        ReadWritePaths = nplib.readWritePaths opts;
        ProtectHome = true;
        PrivateTmp = true;
        PrivateNetwork = true;
        RestrictAddressFamilies = [ "AF_UNIX" ]; # NOTIFY_SOCKET only
        IPAddressDeny = "any";
        NoNewPrivileges = true;
        # Every file it writes is root's in a root-owned directory: no
        # capability needed (not even CAP_DAC_OVERRIDE).
        CapabilityBoundingSet = [ "" ];
        # The GPUs, by their /proc/devices group names (systemd resolves
        # "char-NAME" there when the unit starts, matching NAME with
        # fnmatch(3), see src/core/bpf-devices.c). Current drivers
        # (kernel-open/nvidia/nv.c, nvidia-modeset-linux.c) register major
        # 195 as "nvidia" (/dev/nvidia0..N), "nvidiactl" and
        # "nvidia-modeset"; drivers with the old nv-frontend module
        # registered it as "nvidia-frontend". Then /dev/nvidia-uvm{,-tools},
        # /dev/nvidia-caps/* (MIG), /dev/nvidia-caps-imex-channels/*,
        # NVSwitch and NVLink nodes on HGX boards, /dev/dri/* ("drm") for
        # EGL. "char-nvidia*" covers every one of these and any later name;
        # the explicit entries document what is expected. A major whose
        # module is not loaded when the unit starts matches nothing (systemd
        # logs it at debug level only). Device nodes are made by the NixOS
        # nvidia module's udev rules, not nvidia-modprobe (which
        # NoNewPrivileges would stop). No PrivateDevices=: it would hide them.
        DevicePolicy = "closed";
        DeviceAllow = [
          "char-nvidia rw"
          "char-nvidiactl rw"
          "char-nvidia-modeset rw"
          "char-nvidia-frontend rw"
          "char-nvidia-uvm rw"
          "char-nvidia-caps rw"
          "char-nvidia-nvswitch rw"
          "char-nvidia-nvlink rw"
          "char-nvidia-caps-imex-channels rw"
          "char-nvidia* rw"
          "char-drm rw"
        ];
        ProtectKernelTunables = true;
        ProtectKernelModules = true;
        ProtectKernelLogs = true;
        ProtectControlGroups = true;
        ProtectClock = true;
        ProtectHostname = true;
        # The in-container self-test (selftest.container) needs namespaces
        # and runc; it is for manual bring-up, not this unit.
        RestrictNamespaces = true;
        RestrictRealtime = true;
        RestrictSUIDSGID = true;
        LockPersonality = true;
        # No MemoryDenyWriteExecute: the Vulkan drivers (NVIDIA's, and
        # lavapipe's LLVM) JIT-compile shaders into W+X memory.
        SystemCallArchitectures = "native";
        SystemCallFilter = [ "@system-service" ];
        SystemCallErrorNumber = "EPERM";
      };
    };

    # --- nodeprep health: the periodic re-check ------------------------
    # A timer runs `nodeprep health` every services.nodeprep.health.interval
    # while nodeprep.service is active (Requisite=: a node `up` blocked is not
    # re-checked into "ready"). Same hardening as nodeprep.service; it writes
    # only the lock, status and metrics directories and the CDI specs it
    # re-patches (the pod path is re-checked too).
    # A health run that finds the node not ready exits 1, and must wait for
    # the timer.
    systemd.services.nodeprep-health = lib.mkIf cfg.health.enable (followerService {
      description = "Re-check NVIDIA GPUs for k3s (inventory, CDI re-patch, self-test) and update nodeprep_ready";
      execArgs = nplib.healthExecArgs opts;
      readWritePaths = nplib.healthReadWritePaths opts;
      # The Node report (health.reportToNode) needs TCP to the API server:
      # the host's loopback (k3s's agent load balancer, or a server's own
      # API server) and health.apiServerAddresses only; every other address
      # stays denied, and the rest of the hardening is nodeprep.service's.
      serviceConfig = lib.optionalAttrs cfg.health.reportToNode {
        PrivateNetwork = false;
        RestrictAddressFamilies = [
          "AF_UNIX"
          "AF_INET"
          "AF_INET6"
        ];
        IPAddressDeny = "any";
        IPAddressAllow = [ "localhost" ] ++ cfg.health.apiServerAddresses;
      };
    });
    systemd.timers.nodeprep-health = lib.mkIf cfg.health.enable {
      description = "Run nodeprep health every ${cfg.health.interval}";
      wantedBy = [ "timers.target" ];
      timerConfig = {
        OnActiveSec = cfg.health.interval;
        OnUnitActiveSec = cfg.health.interval;
        AccuracySec = "10s";
      };
    };
    # --- end nodeprep health ---

    # --- re-patch on write: a path unit over the runtime's CDI spec dirs ---
    # The NVIDIA device plugin (cdi-* strategies) and the DRA driver write
    # their specs after boot, without the graphics mounts; the generator
    # rewrites its own when it restarts. PathChanged= on each spec
    # directory (systemd.path(5): an entry created, closed after writing,
    # moved in or out, deleted) runs `nodeprep cdi patch --changes-only`,
    # which patches every GPU spec of the runtime's view under the lock
    # (waiting for an `up` or `health` that holds it), writes nothing when
    # nothing changed (its own write's event then costs one quiet run), and
    # rewrites the status file and the metrics when a spec or the verdict
    # changed. `nodeprep cdi watch` is the same trigger as one process
    # (docs/runtime-view.md, "After boot").
    systemd.paths.nodeprep-cdi-patch = lib.mkIf cfg.repatch.enable {
      description = "Re-patch the CDI specs nodeprep serves GPUs from whenever one is written";
      wantedBy = [ "multi-user.target" ];
      after = [ "nodeprep.service" ];
      pathConfig = {
        PathChanged = nplib.cdiWatchDirs opts;
        Unit = "nodeprep-cdi-patch.service";
      };
    };
    # Like health: only a node `up` brought up is re-patched (a spec written
    # before `up` ends is `up`'s to patch).
    systemd.services.nodeprep-cdi-patch = lib.mkIf cfg.repatch.enable (followerService {
      description = "Re-patch the CDI specs with the Vulkan/EGL/glvnd mounts and update nodeprep_ready";
      execArgs = nplib.patchExecArgs opts;
      readWritePaths = nplib.patchReadWritePaths opts;
      # No GPU device is opened: the patch reads files only.
      without = [ "DeviceAllow" ];
      serviceConfig.DevicePolicy = "closed";
    });
    # --- end re-patch on write ---
  };
}
