# The facts of one NixOS node configuration that `nodeprep cluster
# check-node --facts` judges (schema nodeprep.dev/node-facts/v1,
# docs/nixos.md "In your fleet's CI"), from the configuration's evaluated
# `config`. Used by the flake's lib.mkChecks (nix/fleet-check.nix), by
# checks.<system>.module-eval (nix/module-eval.nix) and by the evaluation
# without nixpkgs (nix/module-stub-eval.nix), so all three gather the same.
#
# Store paths keep their string context (the driver package, the toolkit's
# directories on the k3s unit's PATH, nodeprep's ExecStart), so a check
# derivation built from builtins.toJSON of these facts depends on them and
# has them in its sandbox. The kubelet config file the k3s arguments name is
# given as its text (k3s.kubeletConfig) rather than as a store path to read.
#
# Needs only builtins and `lib` functions the stand-in lib (nix/stub/lib.nix)
# has too.
{
  lib,
  # the configuration's pkgs (for glibc's ldconfig, as the generator uses it)
  pkgs,
  # the nixosConfigurations attribute name
  name,
  # the configuration's `config`
  config,
  # the simulated inventory the check judges against
  simulate ? "dgx-h200",
}:
let
  np = config.services.nodeprep;
  d = np.derived;
  k3s = config.services.k3s;
  tk = config.hardware.nvidia-container-toolkit;
  etc = config.environment.etc;

  # The text of a file the configuration writes under /etc, or null.
  etcText =
    path:
    let
      rel = lib.removePrefix "/etc/" path;
    in
    if lib.hasPrefix "/etc/" path && etc ? ${rel} && (etc.${rel}.enable or true) && (etc.${rel}.text or null) != null then
      etc.${rel}.text
    else
      null;

  # A manifest's text: JSON, which k3s's YAML reader reads as it is.
  manifestText =
    m:
    builtins.toJSON (
      if builtins.isList m then
        {
          apiVersion = "v1";
          kind = "List";
          items = m;
        }
      else
        m
    );

  # services.k3s.manifests: those given as `content`, and those whose
  # `source` is a file of the flake (a store path made by a build cannot be
  # read at evaluation without building it, and is left out).
  k3sManifests = lib.mapAttrs' (
    _: m: lib.nameValuePair m.target (if m.content != null then manifestText m.content else builtins.readFile m.source)
  ) (lib.filterAttrs (_: m: m.enable && (m.content != null || builtins.isPath m.source)) (k3s.manifests or { }));

  dropInDir = "${d.k3sConfig}.d/";
  dropIns = lib.mapAttrs' (n: v: lib.nameValuePair (lib.removePrefix (lib.removePrefix "/etc/" dropInDir) n) v.text) (
    lib.filterAttrs (
      n: v: lib.hasPrefix (lib.removePrefix "/etc/" dropInDir) n && (v.enable or true) && (v.text or null) != null
    ) etc
  );

  # The arguments `nvidia-ctk cdi generate` gets from the generator unit, as
  # nixos/modules/services/hardware/nvidia-container-toolkit/cdi-generate.nix
  # writes them into its script (read there, since the script is a store
  # file): an option an older toolkit module lacks takes the value that
  # module passed.
  driver = config.hardware.nvidia.package;
  generatorArgs =
    [
      "--format"
      "json"
    ]
    ++ builtins.concatMap (f: [
      "--csv.file"
      (toString f)
    ]) (tk.csv-files or [ ])
    ++ [
      "--discovery-mode"
      (tk.discovery-mode or "auto")
      "--device-name-strategy"
      (tk.device-name-strategy or "index")
    ]
    ++ builtins.concatMap (h: [
      "--disable-hook"
      h
    ]) (tk.disable-hooks or [ "create-symlinks" ])
    ++ builtins.concatMap (h: [
      "--enable-hook"
      h
    ]) (tk.enable-hooks or [ ])
    ++ [
      "--ldconfig-path"
      (lib.getExe' pkgs.glibc "ldconfig")
      "--library-search-path"
      "${lib.getLib driver}/lib"
      "--nvidia-cdi-hook-path"
      "${lib.getOutput "tools" toolkitPackage}/bin/nvidia-cdi-hook"
    ]
    ++ (tk.extraArgs or [ ]);
  toolkitPackage = tk.package or pkgs.nvidia-container-toolkit;
in
{
  schema = "nodeprep.dev/node-facts/v1";
  inherit name simulate;
  nodeprep = {
    configYaml = etc."nodeprep/config.yaml".text;
    execStart = config.systemd.services.nodeprep.serviceConfig.ExecStart;
  };
  k3s = {
    role = k3s.role or "agent";
    version = k3s.package.version;
    dataDir = d.k3sDataDir;
    configPath = d.k3sConfig;
    configYaml = etcText d.k3sConfig;
    inherit dropIns;
    args = d.k3sArgs;
    # The file's KubeletConfiguration as text (JSON, which is YAML): the
    # same value the k3s module writes there, not its bytes.
    kubeletConfig = if d.kubeletConfig == null then null else builtins.toJSON d.kubeletConfig;
    unitPath = d.k3sUnitPath;
    containerdConfigTemplate = k3s.containerdConfigTemplate or null;
    autoDeployManifests =
      (if (k3s.role or "agent") == "server" then k3sManifests else { })
      // builtins.mapAttrs (_: manifestText) d.manifests;
  };
  toolkit = {
    enable = tk.enable or false;
    inherit (toolkitPackage) version;
    inherit generatorArgs;
    mounts = map (m: { inherit (m) hostPath containerPath; }) (tk.mounts or [ ]);
    runtimeConfigToml = etcText "/etc/nvidia-container-runtime/config.toml";
  };
  driver = {
    inherit (driver) version;
    package = "${driver}";
  };
}
