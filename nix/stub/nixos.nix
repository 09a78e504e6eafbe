# Stand-ins for the nixpkgs packages and NixOS modules that nix/module.nix
# composes with, for nix/module-stub-eval.nix (no nixpkgs on the machine
# that runs scripts/nix-check.sh). Returns { lib, pkgs, modules }: `modules`
# are the stand-ins of the NixOS modules (systemd's unit options, the k3s
# module, the nvidia-container-toolkit module, the rest of a NixOS system
# as free-form defaults), to be evaluated with nix/module.nix and a node
# configuration by lib.evalModules (./lib.nix).
#
# The k3s and nvidia-container-toolkit stand-ins follow the newest nixpkgs
# modules that have them: option names, types and defaults, the units'
# dependencies and the ExecStart lines are built the same way, so an
# option the real module lacks, a value of the wrong type, or an argument
# the real unit would not pass fails or shows here too. Sources (read, not
# copied):
# - k3s: nixos/modules/services/cluster/rancher/default.nix
#   (mkRancherModule, shared with rke2 since nixpkgs PR 447847, "nixos/rke2:
#   merge code with nixos/k3s") and rancher/k3s.nix (clusterInit,
#   disableAgent, role defaulting to server);
# - the toolkit: nixos/modules/services/hardware/nvidia-container-toolkit/
#   default.nix and cdi-generate.nix; the package's `tools` output:
#   pkgs/by-name/nv/nvidia-container-toolkit/package.nix;
# - the default PATH of a unit: nixos/lib/systemd-lib.nix serviceConfig.
let
  lib = import ./lib.nix;
  inherit (lib) types mkOption;

  system = "x86_64-linux";

  # A package: a real (never built) derivation, so store paths carry their
  # string context as nixpkgs' do, with each output marked as nixpkgs'
  # mkDerivation marks them (outputSpecified, which lib.getOutput reads).
  mkPkg =
    {
      pname,
      version,
      outputs ? [ "out" ],
      mainProgram ? pname,
      env ? { },
      name ? "${pname}-${version}",
    }:
    let
      drv = derivation (
        {
          inherit name;
          inherit system outputs;
          builder = "/bin/sh";
        }
        // env
      );
      common = {
        inherit pname version name;
        meta.mainProgram = mainProgram;
      }
      // builtins.listToAttrs (
        map (o: {
          name = o;
          value = outputOf o;
        }) outputs
      );
      outputOf = o: drv.${o} // common // { outputSpecified = true; };
    in
    drv // common;

  writeText =
    name: text:
    mkPkg {
      inherit name;
      pname = name;
      version = "text";
      env.text = text;
    };

  driver = mkPkg {
    pname = "nvidia-x11";
    version = "580.95.05";
    outputs = [
      "out"
      "bin"
    ];
  };

  pkgs = rec {
    inherit writeText lib;
    stdenv.hostPlatform.system = system;
    # A build script as a derivation (never built here): its text is kept.
    runCommand =
      name: env: script:
      mkPkg {
        pname = name;
        version = "check";
        env = {
          buildCommand = script;
          nativeBuildInputs = env.nativeBuildInputs or [ ];
        };
      }
      // {
        inherit name script;
      };
    k3s = mkPkg {
      pname = "k3s";
      version = "1.33.4+k3s1";
    };
    nvidia-container-toolkit = mkPkg {
      pname = "nvidia-container-toolkit";
      version = "1.17.8";
      outputs = [
        "out"
        "tools"
      ];
      mainProgram = "nvidia-ctk";
    };
    glibc = mkPkg {
      pname = "glibc";
      version = "2.40";
      outputs = [
        "out"
        "bin"
      ];
    };
    jq = mkPkg {
      pname = "jq";
      version = "1.8";
    };
    vulkan-loader = mkPkg {
      pname = "vulkan-loader";
      version = "1.4.313";
    };
    libglvnd = mkPkg {
      pname = "libglvnd";
      version = "1.7.0";
    };
    nodeprep = mkPkg {
      pname = "nodeprep";
      version = "0.1.0";
    };
    coreutils = mkPkg {
      pname = "coreutils";
      version = "9.7";
    };
    findutils = mkPkg {
      pname = "findutils";
      version = "4.10";
    };
    gnugrep = mkPkg {
      pname = "gnugrep";
      version = "3.12";
    };
    gnused = mkPkg {
      pname = "gnused";
      version = "4.9";
    };
    systemd = mkPkg {
      pname = "systemd";
      version = "257";
    };
    nvidiaPackages = {
      production = driver;
      stable = driver;
    };
    addDriverRunpath.driverLink = "/run/opengl-driver";
    formats = {
      json = _: {
        type = types.anything;
        generate = name: v: writeText name (builtins.toJSON v);
      };
      # YAML 1.2 is a superset of JSON: the text differs from remarshal's,
      # the value does not.
      yaml_1_2 = _: {
        type = types.anything;
        generate = name: v: writeText name (builtins.toJSON v);
      };
    };
    # The CDI generator script of cdi-generate.nix: the same arguments to
    # `nvidia-ctk cdi generate`, kept as text.
    cdiGenerator =
      {
        csv-files,
        device-name-strategy,
        discovery-mode,
        mounts,
        disable-hooks,
        enable-hooks,
        extraArgs,
        nvidia-container-toolkit,
        nvidia-driver,
      }:
      mkPkg {
        pname = "nvidia-cdi-generator";
        version = "script";
        env.text = builtins.concatStringsSep " " (
          [
            (lib.getExe' nvidia-container-toolkit "nvidia-ctk")
            "cdi"
            "generate"
            "--format"
            "json"
          ]
          ++ builtins.concatMap (f: [
            "--csv.file"
            (toString f)
          ]) csv-files
          ++ [
            "--discovery-mode"
            discovery-mode
            "--device-name-strategy"
            device-name-strategy
          ]
          ++ builtins.concatMap (h: [
            "--disable-hook"
            h
          ]) disable-hooks
          ++ builtins.concatMap (h: [
            "--enable-hook"
            h
          ]) enable-hooks
          ++ [
            "--ldconfig-path"
            (lib.getExe' glibc "ldconfig")
            "--library-search-path"
            "${lib.getLib nvidia-driver}/lib"
            "--nvidia-cdi-hook-path"
            "${lib.getOutput "tools" nvidia-container-toolkit}/bin/nvidia-cdi-hook"
          ]
          ++ extraArgs
        );
        env.mounts = builtins.toJSON mounts;
        mainProgram = "nvidia-cdi-generator";
      };
  };

  # --- systemd's unit options (the parts these modules use) ----------------
  defaultPath = [
    pkgs.coreutils
    pkgs.findutils
    pkgs.gnugrep
    pkgs.gnused
    pkgs.systemd
  ];
  unitType =
    withPath:
    types.attrsOf (
      types.submoduleWith {
        freeform = true;
        # nixos/lib/systemd-lib.nix serviceConfig: path gets coreutils,
        # findutils, gnugrep, gnused and systemd (mkAfter), and
        # Environment=PATH is the bin directories, then the sbin ones.
        derive =
          _: v:
          if !withPath then
            { }
          else
            let
              path = (v.path or [ ]) ++ defaultPath;
              dirs = sub: map (p: if builtins.isString p then "${p}/${sub}" else "${lib.getBin p}/${sub}") path;
            in
            {
              inherit path;
              environment = (v.environment or { }) // {
                PATH = builtins.concatStringsSep ":" (dirs "bin" ++ dirs "sbin");
              };
            };
      }
    );
  systemdModule = {
    options = {
      systemd = {
        services = mkOption {
          type = unitType true;
          default = { };
        };
        paths = mkOption {
          type = unitType false;
          default = { };
        };
        timers = mkOption {
          type = unitType false;
          default = { };
        };
        package = mkOption {
          type = types.package;
          default = pkgs.systemd;
        };
        tmpfiles = {
          rules = mkOption {
            type = types.listOf types.str;
            default = [ ];
          };
          settings = mkOption {
            type = types.attrsOf types.anything;
            default = { };
          };
        };
      };
      environment = {
        etc = mkOption {
          type = types.attrsOf (
            types.submoduleWith {
              freeform = true;
              derive = name: v: lib.optionalAttrs (v ? text) { source = writeText "etc-${baseNameOf name}" v.text; };
            }
          );
          default = { };
        };
        systemPackages = mkOption {
          type = types.listOf types.package;
          default = [ ];
        };
      };
      assertions = mkOption {
        type = types.listOf types.attrs;
        default = [ ];
      };
      warnings = mkOption {
        type = types.listOf types.str;
        default = [ ];
      };
    };
  };

  # --- the rest of a NixOS system: free-form values with their defaults -----
  baseModule =
    { config, ... }:
    {
      config = {
        boot.kernelPackages.nvidiaPackages = lib.mkOptionDefault pkgs.nvidiaPackages;
        boot.zfs.enabled = lib.mkOptionDefault false;
        hardware.nvidia.package = lib.mkOptionDefault config.boot.kernelPackages.nvidiaPackages.stable;
        hardware.nvidia.datacenter.enable = lib.mkOptionDefault false;
        hardware.graphics.enable = lib.mkOptionDefault false;
        hardware.graphics.extraPackages = lib.mkOptionDefault [ ];
        services.xserver.videoDrivers = lib.mkOptionDefault [ ];
        networking.networkmanager.enable = lib.mkOptionDefault false;
        virtualisation.docker.enable = lib.mkOptionDefault false;
        virtualisation.docker.enableNvidia = lib.mkOptionDefault false;
        virtualisation.docker.package.version = lib.mkOptionDefault "28.3.3";
        virtualisation.podman.enable = lib.mkOptionDefault false;
        virtualisation.podman.enableNvidia = lib.mkOptionDefault false;
      };
    };

  # --- k3s: the rancher module's options and unit, for name = "k3s" ---------
  k3sModule =
    { config, ... }:
    let
      name = "k3s";
      cfg = config.services.k3s;
      manifestDir = "/var/lib/rancher/${name}/server/manifests";
      imageDir = "/var/lib/rancher/${name}/agent/images";
      containerdConfigTemplateFile = "/var/lib/rancher/${name}/agent/etc/containerd/config.toml.tmpl";
      manifestFormat = pkgs.formats.yaml_1_2 { };
      mkManifestTarget =
        n: if lib.hasSuffix ".yaml" n || lib.hasSuffix ".yml" n || lib.hasSuffix ".json" n then n else n + ".yaml";
      manifestType = types.submoduleWith {
        options = {
          enable = mkOption {
            type = types.bool;
            default = true;
          };
          target = mkOption { type = types.nonEmptyStr; };
          content = mkOption {
            type = types.nullOr (types.either types.attrs (types.listOf types.attrs));
            default = null;
          };
          source = mkOption { type = types.path; };
        };
        derive =
          n: v:
          {
            target = mkManifestTarget n;
          }
          // lib.optionalAttrs (v.content != null) {
            source = manifestFormat.generate "${n}-manifest-${baseNameOf n}" (
              if builtins.isList v.content then
                {
                  apiVersion = "v1";
                  kind = "List";
                  items = v.content;
                }
              else
                v.content
            );
          };
      };
      opt = type: default: mkOption { inherit type default; };
    in
    {
      options.services.k3s = {
        enable = lib.mkEnableOption name;
        package = lib.mkPackageOption pkgs name { };
        role = opt (types.enum [
          "server"
          "agent"
        ]) "server";
        serverAddr = opt types.str "";
        token = opt types.str "";
        tokenFile = opt (types.nullOr types.path) null;
        agentToken = opt types.str "";
        agentTokenFile = opt (types.nullOr types.path) null;
        extraFlags = opt (types.either types.str (types.listOf types.str)) [ ];
        environmentFile = opt (types.nullOr types.path) null;
        configPath = opt (types.nullOr types.path) null;
        disable = opt (types.listOf types.str) [ ];
        nodeName = opt (types.nullOr types.str) null;
        nodeLabel = opt (types.listOf types.str) [ ];
        nodeTaint = opt (types.listOf types.str) [ ];
        nodeIP = opt (types.nullOr types.str) null;
        nodeExternalIP = opt (types.nullOr types.str) null;
        selinux = opt types.bool false;
        manifests = opt (types.attrsOf manifestType) { };
        containerdConfigTemplate = opt (types.nullOr types.str) null;
        images = opt (types.listOf types.package) [ ];
        gracefulNodeShutdown = {
          enable = lib.mkEnableOption "graceful node shutdowns";
          shutdownGracePeriod = opt types.nonEmptyStr "30s";
          shutdownGracePeriodCriticalPods = opt types.nonEmptyStr "10s";
        };
        extraKubeletConfig = opt (types.attrsOf types.anything) { };
        extraKubeProxyConfig = opt (types.attrsOf types.anything) { };
        autoDeployCharts = opt (types.attrsOf types.anything) { };
        charts = opt (types.attrsOf types.anything) { };
        # rancher/k3s.nix
        clusterInit = opt types.bool false;
        disableAgent = opt types.bool false;
      };

      config = lib.mkIf cfg.enable {
        warnings =
          lib.optional (cfg.role != "server" && cfg.manifests != { })
            "${name}: Auto deploying manifests are only installed on server nodes (role == server), they will be ignored by this node."
          ++ lib.optional (
            cfg.role == "agent" && cfg.configPath == null && cfg.serverAddr == ""
          ) "${name}: serverAddr or configPath (with 'server' key) should be set if role is 'agent'"
          ++ lib.optional (
            cfg.role == "agent" && cfg.configPath == null && cfg.tokenFile == null && cfg.token == ""
          ) "${name}: token, tokenFile or configPath (with 'token' or 'token-file' keys) should be set if role is 'agent'"
          ++ lib.optional (
            cfg.role == "agent" && (cfg.agentTokenFile != null || cfg.agentToken != "")
          ) "${name}: agentToken and agentTokenFile should not be set if role is 'agent'";
        assertions = [
          {
            assertion = cfg.role == "agent" -> !cfg.disableAgent;
            message = "k3s: disableAgent must be false if role is 'agent'";
          }
          {
            assertion = cfg.role == "agent" -> !cfg.clusterInit;
            message = "k3s: clusterInit must be false if role is 'agent'";
          }
        ];
        environment.systemPackages = [ cfg.package ];
        systemd.tmpfiles.settings."10-${name}" =
          lib.mapAttrs' (_: m: lib.nameValuePair "${manifestDir}/${m.target}" { "L+".argument = "${m.source}"; }) (
            lib.filterAttrs (_: m: m.enable) cfg.manifests
          )
          // builtins.listToAttrs (
            map (i: lib.nameValuePair "${imageDir}/${i.name}" { "L+".argument = "${i}"; }) cfg.images
          )
          // lib.optionalAttrs (cfg.containerdConfigTemplate != null) {
            ${containerdConfigTemplateFile}."L+".argument = "${writeText "config.toml.tmpl" cfg.containerdConfigTemplate}";
          };
        systemd.services.${name} =
          let
            kubeletParams =
              lib.optionalAttrs cfg.gracefulNodeShutdown.enable {
                inherit (cfg.gracefulNodeShutdown) shutdownGracePeriod shutdownGracePeriodCriticalPods;
              }
              // cfg.extraKubeletConfig;
            kubeletConfig = manifestFormat.generate "${name}-kubelet-config" (
              {
                apiVersion = "kubelet.config.k8s.io/v1beta1";
                kind = "KubeletConfiguration";
              }
              // kubeletParams
            );
            kubeProxyConfig = manifestFormat.generate "${name}-kubeProxy-config" (
              {
                apiVersion = "kubeproxy.config.k8s.io/v1alpha1";
                kind = "KubeProxyConfiguration";
              }
              // cfg.extraKubeProxyConfig
            );
            extraBinFlags = lib.optional cfg.clusterInit "--cluster-init" ++ lib.optional cfg.disableAgent "--disable-agent";
          in
          {
            description = "${name} service";
            after = [
              "firewall.service"
              "network-online.target"
            ];
            wants = [
              "firewall.service"
              "network-online.target"
            ];
            wantedBy = [ "multi-user.target" ];
            path = lib.optional config.boot.zfs.enabled config.boot.zfs.package;
            serviceConfig = {
              Type = if cfg.role == "agent" then "exec" else "notify";
              KillMode = "process";
              Delegate = "yes";
              Restart = "always";
              RestartSec = "5s";
              TimeoutStartSec = 0;
              EnvironmentFile = cfg.environmentFile;
              ExecStart = builtins.concatStringsSep " \\\n " (
                [ "${cfg.package}/bin/${name} ${cfg.role}" ]
                ++ lib.optional (cfg.serverAddr != "") "--server ${cfg.serverAddr}"
                ++ lib.optional (cfg.token != "") "--token ${cfg.token}"
                ++ lib.optional (cfg.tokenFile != null) "--token-file ${toString cfg.tokenFile}"
                ++ lib.optional (cfg.agentToken != "") "--agent-token ${cfg.agentToken}"
                ++ lib.optional (cfg.agentTokenFile != null) "--agent-token-file ${toString cfg.agentTokenFile}"
                ++ lib.optional (cfg.configPath != null) "--config ${toString cfg.configPath}"
                ++ map (d: "--disable=${d}") cfg.disable
                ++ lib.optional (cfg.nodeName != null) "--node-name=${cfg.nodeName}"
                ++ map (l: "--node-label=${l}") cfg.nodeLabel
                ++ map (t: "--node-taint=${t}") cfg.nodeTaint
                ++ lib.optional (cfg.nodeIP != null) "--node-ip=${cfg.nodeIP}"
                ++ lib.optional (cfg.nodeExternalIP != null) "--node-external-ip=${cfg.nodeExternalIP}"
                ++ lib.optional cfg.selinux "--selinux"
                ++ lib.optional (kubeletParams != { }) "--kubelet-arg=config=${kubeletConfig}"
                ++ lib.optional (cfg.extraKubeProxyConfig != { }) "--kube-proxy-arg=config=${kubeProxyConfig}"
                ++ extraBinFlags
                ++ lib.flatten cfg.extraFlags
              );
            };
          };
      };
    };

  # --- hardware.nvidia-container-toolkit ------------------------------------
  toolkitModule =
    { config, ... }:
    let
      cfg = config.hardware.nvidia-container-toolkit;
      opt = type: default: mkOption { inherit type default; };
      nvidia-driver = config.hardware.nvidia.package;
    in
    {
      options.hardware.nvidia-container-toolkit = {
        enable = opt types.bool false;
        package = lib.mkPackageOption pkgs "nvidia-container-toolkit" { };
        csv-files = opt (types.listOf types.path) [ ];
        device-name-strategy = opt (types.enum [
          "index"
          "uuid"
          "type-index"
        ]) "index";
        disable-hooks = opt (types.listOf types.nonEmptyStr) [ "create-symlinks" ];
        discovery-mode = opt (types.enum [
          "auto"
          "csv"
          "nvml"
          "wsl"
        ]) "auto";
        enable-hooks = opt (types.listOf types.nonEmptyStr) [ ];
        extraArgs = opt (types.listOf types.str) [ ];
        mount-nvidia-docker-1-directories = opt types.bool true;
        mount-nvidia-executables = opt types.bool true;
        # listOf (submodule { containerPath; hostPath; mountOptions; })
        mounts = mkOption {
          type = types.listOf (types.attrsOf types.anything);
          default = [ ];
          apply = map (
            m:
            {
              mountOptions = [
                "ro"
                "nosuid"
                "nodev"
                "bind"
              ];
            }
            // m
          );
        };
        suppressNvidiaDriverAssertion = opt types.bool false;
      };

      config = lib.mkIf cfg.enable {
        assertions = [
          {
            assertion =
              config.hardware.nvidia.datacenter.enable
              || builtins.elem "nvidia" config.services.xserver.videoDrivers
              || cfg.suppressNvidiaDriverAssertion;
            message = "`nvidia-container-toolkit` requires nvidia drivers";
          }
          {
            assertion = builtins.length cfg.csv-files > 0 -> cfg.discovery-mode == "csv";
            message = "When CSV files are provided, discovery-mode has to be csv.";
          }
        ];
        hardware.graphics.enable = lib.mkIf (!config.hardware.nvidia.datacenter.enable) true;
        hardware.nvidia-container-toolkit.mounts = lib.mkMerge [
          [
            {
              containerPath = pkgs.addDriverRunpath.driverLink;
              hostPath = pkgs.addDriverRunpath.driverLink;
            }
            {
              containerPath = "${lib.getLib nvidia-driver}";
              hostPath = "${lib.getLib nvidia-driver}";
            }
            {
              containerPath = "${lib.getLib pkgs.glibc}/lib";
              hostPath = "${lib.getLib pkgs.glibc}/lib";
            }
            {
              containerPath = "${lib.getLib pkgs.glibc}/lib64";
              hostPath = "${lib.getLib pkgs.glibc}/lib64";
            }
          ]
          (lib.mkIf cfg.mount-nvidia-executables (
            map
              (x: {
                containerPath = "/usr/bin/${x}";
                hostPath = lib.getExe' nvidia-driver x;
              })
              [
                "nvidia-cuda-mps-control"
                "nvidia-cuda-mps-server"
                "nvidia-debugdump"
                "nvidia-powerd"
                "nvidia-smi"
              ]
          ))
          (lib.mkIf cfg.mount-nvidia-docker-1-directories [
            {
              containerPath = "/usr/local/nvidia/lib";
              hostPath = "${lib.getLib nvidia-driver}/lib";
            }
            {
              containerPath = "/usr/local/nvidia/lib64";
              hostPath = "${lib.getLib nvidia-driver}/lib";
            }
          ])
        ];
        services.udev.extraRules = ''
          KERNEL=="nvidia", RUN+="${lib.getExe' config.systemd.package "systemctl"} --no-block restart nvidia-container-toolkit-cdi-generator.service'"
        '';
        systemd.services.nvidia-container-toolkit-cdi-generator = {
          description = "Container Device Interface (CDI) for Nvidia generator";
          serviceConfig = {
            ExecStart = lib.getExe (
              pkgs.cdiGenerator {
                inherit (cfg)
                  csv-files
                  device-name-strategy
                  discovery-mode
                  mounts
                  disable-hooks
                  enable-hooks
                  extraArgs
                  ;
                nvidia-container-toolkit = cfg.package;
                inherit nvidia-driver;
              }
            );
            ExecStartPre = "-${lib.getExe' pkgs.systemd "udevadm"} settle --timeout=180";
            RemainAfterExit = true;
            RuntimeDirectory = "cdi";
            Type = "oneshot";
          };
          wantedBy = [ "multi-user.target" ];
        };
      };
    };
in
{
  inherit lib pkgs;
  modules = [
    systemdModule
    baseModule
    k3sModule
    toolkitModule
  ];
}
