# Evaluates nix/module.nix itself, without nixpkgs, for the units the
# re-patch adds (the path unit over the CDI spec directories and the
# service it starts). Evaluates to `true`, or throws naming the first
# failing case:
#
#   nix-instantiate --eval --strict nix/module-stub-eval.nix
#
# Run by scripts/nix-check.sh. It stands in for the few nixpkgs `lib`
# functions the module's config calls (mkIf, mkDefault, getExe, ...) with
# their documented meaning for the values used here, and feeds the
# module's own config back into it (the module reads
# config.systemd.services.nodeprep.serviceConfig for the units it derives
# from it). The flake's checks.<system>.module-eval evaluates the same
# module in a real NixOS system (nix/module-eval.nix).
let
  inherit (builtins)
    all
    any
    concatStringsSep
    elem
    filter
    hasAttr
    isAttrs
    ;
  store = "/nix/store/00000000000000000000000000000000";
  pkg = name: {
    inherit name;
    outPath = "${store}-${name}";
  };

  # The nixpkgs lib functions module.nix calls, for these inputs.
  lib = {
    inherit any filter concatStringsSep;
    mkIf = cond: v: if cond then v else { };
    mkDefault = v: v;
    optional = cond: v: if cond then [ v ] else [ ];
    getExe = p: "${p.outPath}/bin/${p.name}";
    getLib = p: p.outPath;
    getName = p: p.name;
    hasPrefix = p: s: builtins.substring 0 (builtins.stringLength p) s == p;
    hasAttrByPath =
      path: set:
      if path == [ ] then
        true
      else
        isAttrs set && hasAttr (builtins.head path) set && lib.hasAttrByPath (builtins.tail path) set.${builtins.head path};
    # Options are not evaluated here: the config below gives their values.
    mkOption = o: o;
    mkEnableOption = d: d;
    mkPackageOption = _: _: _: null;
    literalExpression = e: e;
    types = {
      bool = null;
      str = null;
      path = null;
      package = null;
      listOf = _: null;
      nullOr = _: null;
      enum = _: null;
    };
  };
  pkgs = {
    addDriverRunpath.driverLink = "/run/opengl-driver";
    formats.json = _: { type = null; };
  };

  # The option values of a typical node (example-configuration.nix).
  options = {
    services.nodeprep = {
      enable = true;
      package = pkg "nodeprep";
      vulkanLoader = pkg "vulkan-loader";
      libglvnd = pkg "libglvnd";
      taints = [ "nvidia.com/gpu=present:NoSchedule" ];
      labels = [ ];
      onSelftestFailure = "block";
      metrics.textfileDir = "/var/lib/prometheus-node-exporter/textfile";
      settings = { };
      extraArgs = [ ];
      health = {
        enable = true;
        interval = "5min";
      };
      repatch.enable = true;
    };
    services.k3s = {
      enable = true;
      extraFlags = [ ];
    };
    hardware.nvidia-container-toolkit.enable = true;
    hardware.graphics = {
      enable = true;
      extraPackages = [ ];
    };
  };

  module = import ./module.nix {
    inherit lib pkgs;
    config = options // {
      inherit (module.config) systemd environment;
    };
  };
  c = module.config;
  path = c.systemd.paths.nodeprep-cdi-patch;
  svc = c.systemd.services.nodeprep-cdi-patch;
  up = c.systemd.services.nodeprep;
  sc = svc.serviceConfig;

  cases = [
    {
      name = "the path unit watches containerd's CDI spec directories (PathChanged=)";
      ok = path.pathConfig.PathChanged == [
        "/etc/cdi"
        "/run/cdi"
      ];
    }
    {
      name = "the path unit starts nodeprep-cdi-patch.service, from boot, after nodeprep.service";
      ok =
        path.pathConfig.Unit == "nodeprep-cdi-patch.service"
        && elem "multi-user.target" path.wantedBy
        && elem "nodeprep.service" path.after;
    }
    {
      name = "the service re-patches only a node up brought up (after + requisite nodeprep.service)";
      ok = elem "nodeprep.service" svc.after && elem "nodeprep.service" svc.requisite;
    }
    {
      name = "ExecStart is cdi patch --changes-only --wait=30s with the config and the metrics file";
      ok =
        sc.ExecStart
        == concatStringsSep " " (
          map builtins.toJSON [
            "${store}-nodeprep/bin/nodeprep"
            "cdi"
            "patch"
            "--config=/etc/nodeprep/config.yaml"
            "--changes-only"
            "--wait=30s"
            "--metrics-file=/var/lib/prometheus-node-exporter/textfile/nodeprep.prom"
          ]
        );
    }
    {
      name = "oneshot, never restarted (the next write runs it again)";
      ok = sc.Type == "oneshot" && sc.Restart == "no" && !(sc ? RestartSec) && !(sc ? RestartPreventExitStatus);
    }
    {
      name = "nodeprep.service's hardening, no GPU device, writes only lock, status, metrics and spec dirs";
      ok =
        sc.ProtectSystem == "strict"
        && sc.NoNewPrivileges
        && sc.PrivateNetwork
        && sc.CapabilityBoundingSet == up.serviceConfig.CapabilityBoundingSet
        && sc.DevicePolicy == "closed"
        && !(sc ? DeviceAllow)
        && sc.ReadWritePaths == [
          "/run/nodeprep"
          "/var/lib/prometheus-node-exporter/textfile"
          "-/etc/cdi"
          "-/run/cdi"
        ];
    }
    {
      name = "repatch.enable = false leaves both units out";
      ok =
        let
          off = import ./module.nix {
            inherit lib pkgs;
            config = options // {
              services = options.services // {
                nodeprep = options.services.nodeprep // {
                  repatch.enable = false;
                };
              };
              inherit (off.config) systemd environment;
            };
          };
        in
        off.config.systemd.paths.nodeprep-cdi-patch == { } && off.config.systemd.services.nodeprep-cdi-patch == { };
    }
  ];
  failed = filter (c: !c.ok) cases;
in
if failed == [ ] then
  all (c: c.ok) cases
else
  throw "nix/module-stub-eval.nix: FAILED ${(builtins.head failed).name}: got ${
    builtins.toJSON {
      path = path.pathConfig;
      execStart = sc.ExecStart;
      readWritePaths = sc.ReadWritePaths;
    }
  }"
