# The logic of the NixOS module (nix/module.nix), kept free of nixpkgs so
# that CI machines with only `nix-instantiate` (Debian's nix-bin, no
# nixpkgs) can test it: `nix-instantiate --eval --strict nix/tests.nix`.
#
# Only builtins are used here. Everything is a plain function from option
# values to strings and lists; the module does the wiring.
#
#   toYAML          value -> YAML text (block style)
#   mkConfig        module options -> the config attrset (/etc/nodeprep/config.yaml)
#   renderConfig    module options -> the config file's text
#   conflicts       settings keys that typed options own
#   execArgs        module options -> the argv of `nodeprep up` (after the binary)
#   readWritePaths  module options -> ReadWritePaths= for ProtectSystem=strict
#   tmpfilesRules   module options -> systemd-tmpfiles rules for the writable dirs
#   escapeSystemdExecArg(s)  argv -> an ExecStart= line
let
  inherit (builtins)
    attrNames
    concatMap
    concatStringsSep
    elem
    filter
    foldl'
    head
    isAttrs
    isBool
    isFloat
    isInt
    isList
    isPath
    isString
    match
    replaceStrings
    split
    substring
    stringLength
    tail
    toJSON
    ;

  # --- small helpers (what nixpkgs' lib would give us) -------------------

  # Walks `path` (a list of attribute names) into `set`; `default` if absent.
  attrByPath =
    path: default: set:
    if path == [ ] then
      set
    else if isAttrs set && set ? ${head path} then
      attrByPath (tail path) default set.${head path}
    else
      default;

  hasAttrByPath = path: set: attrByPath path null set != null;

  # Like lib.recursiveUpdate: attrsets merge key by key, right side wins.
  recursiveUpdate =
    lhs: rhs:
    lhs
    // builtins.mapAttrs (
      name: value:
      if isAttrs value && lhs ? ${name} && isAttrs lhs.${name} && !(isDerivation value) then
        recursiveUpdate lhs.${name} value
      else
        value
    ) rhs;

  isDerivation = v: isAttrs v && (v.type or null) == "derivation";

  # Removes duplicates, keeping the first occurrence (order matters for
  # ReadWritePaths readability and for test expectations).
  unique = foldl' (acc: x: if elem x acc then acc else acc ++ [ x ]) [ ];

  hasPrefix = prefix: s: substring 0 (stringLength prefix) s == prefix;

  # dirOf on a string without a trailing slash.
  parentDir = p: toString (dirOf p);

  # /var/run is a symlink to /run on NixOS (and every systemd distribution);
  # systemd resolves ReadWritePaths= through symlinks, but naming the real
  # directory keeps the unit readable and the tests exact.
  canonicalRun = p: if hasPrefix "/var/run/" p then "/run/" + substring 9 (-1) p else p;

  # White-space separated words of a string (services.k3s.extraFlags is
  # often one string such as "--node-label a=b --disable traefik").
  words = s: filter (w: isString w && w != "") (split "[[:space:]]+" s);

  # --- YAML ----------------------------------------------------------------

  # A scalar, written as JSON: a JSON string is a valid YAML double-quoted
  # scalar with the same escapes, so nothing a user writes (":", "#", "yes",
  # "0755", leading spaces) can change meaning. Paths become their string
  # (host paths, not copied to the store); derivations their store path.
  yamlScalar =
    v:
    if v == null then
      "null"
    else if isBool v || isInt v || isFloat v then
      toJSON v
    else if isString v then
      toJSON v
    else if isPath v || isDerivation v then
      toJSON (toString v)
    else
      throw "nodeprep: cannot write a ${builtins.typeOf v} in the YAML config";

  # A mapping key: bare when it is plainly a word, quoted otherwise.
  yamlKey = k: if match "[A-Za-z_][A-Za-z0-9_.-]*" k != null then k else toJSON k;

  # Values written on lines of their own (non-empty mappings and lists).
  isBlock =
    v: (isAttrs v && !(isDerivation v) && v != { }) || (isList v && v != [ ]);

  indent = map (l: "  " + l);

  # First line gets `first`, the rest `rest` (for "- " list items).
  prefixLines =
    first: rest: lines:
    if lines == [ ] then [ ] else [ (first + head lines) ] ++ map (l: rest + l) (tail lines);

  yamlLines =
    v:
    if isAttrs v && !(isDerivation v) then
      if v == { } then
        [ "{}" ]
      else
        concatMap (
          k:
          let
            x = v.${k};
          in
          if isBlock x then
            [ "${yamlKey k}:" ] ++ indent (yamlLines x)
          else
            [ "${yamlKey k}: ${if isAttrs x && !(isDerivation x) then "{}" else if isList x then "[]" else yamlScalar x}" ]
        ) (attrNames v)
    else if isList v then
      if v == [ ] then
        [ "[]" ]
      else
        concatMap (x: if isBlock x then prefixLines "- " "  " (yamlLines x) else [ "- ${yamlScalar x}" ]) v
    else
      [ (yamlScalar v) ];

  # --- defaults (DESIGN.md, nodeprep/config.go DefaultConfig) -------------

  defaults = {
    configFile = "/etc/nodeprep/config.yaml";
    cdiSpec = "/var/run/cdi/nvidia-container-toolkit.json";
    k3sConfig = "/etc/rancher/k3s/config.yaml";
    statusFile = "/run/nodeprep/status.json";
    # hostfs.LockPath is /run/nodeprep/lock: always writable.
    lockDir = "/run/nodeprep";
    # pkgs.addDriverRunpath.driverLink + /lib
    nvmlLib = "/run/opengl-driver/lib/libnvidia-ml.so.1";
    metricsFileName = "nodeprep.prom";
    defaultTaint = "nvidia.com/gpu=present:NoSchedule";
  };

  # The module's options, with defaults, as this file's functions take them.
  # Callers pass a subset; missing ones take these values.
  normalize =
    opts:
    {
      settings = { };
      taints = [ defaults.defaultTaint ];
      labels = [ ];
      onSelftestFailure = "block";
      metricsTextfileDir = null;
      # services.k3s.configPath (null: k3s's default /etc/rancher/k3s/config.yaml)
      k3sConfigPath = null;
      # services.k3s.extraFlags (string or list), nodeLabel, nodeTaint
      k3sExtraFlags = [ ];
      k3sNodeLabels = [ ];
      k3sNodeTaints = [ ];
      vulkanLoader = null; # "<vulkan-loader>/lib/libvulkan.so.1"
      eglLib = null; # "<libglvnd>/lib/libEGL.so.1"
      nvmlLib = defaults.nvmlLib;
      configFile = defaults.configFile;
      extraArgs = [ ];
    }
    // opts;

  # Settings keys that typed options own, as attribute paths.
  ownedPaths =
    o:
    [
      [ "join" "taints" ]
      [ "join" "labels" ]
      [ "join" "defaultTaint" ]
      [ "up" "onSelftestFailure" ]
    ]
    ++ (if o.metricsTextfileDir != null then [ [ "up" "metricsFile" ] ] else [ ])
    ++ (if o.k3sConfigPath != null then [ [ "join" "k3sConfig" ] ] else [ ]);

  metricsFileOf =
    o:
    if o.metricsTextfileDir != null then
      "${toString o.metricsTextfileDir}/${defaults.metricsFileName}"
    else
      attrByPath [ "up" "metricsFile" ] null o.settings;

  # Every --k3s-arg nodeprep needs: only the node-label/node-taint words of
  # the k3s command line (nodeprep's k3s merge ignores the rest), so no
  # --token or other secret from extraFlags ever reaches nodeprep's argv or
  # its report. "--node-label x" pairs become "--node-label=x".
  k3sNodeArgs =
    o:
    let
      flags = if isList o.k3sExtraFlags then o.k3sExtraFlags else [ o.k3sExtraFlags ];
      ws = concatMap words flags;
      step =
        st: w:
        if st.pending != null then
          {
            pending = null;
            out = st.out ++ [ "--${st.pending}=${w}" ];
          }
        else
          let
            withValue = match "--?(node-label|node-taint)=(.*)" w;
            bare = match "--?(node-label|node-taint)" w;
          in
          if withValue != null then
            {
              pending = null;
              out = st.out ++ [ "--${head withValue}=${builtins.elemAt withValue 1}" ];
            }
          else if bare != null then
            {
              pending = head bare;
              out = st.out;
            }
          else
            st;
      fromExtra = foldl' step {
        pending = null;
        out = [ ];
      } ws;
    in
    map (l: "--node-label=${l}") o.k3sNodeLabels
    ++ map (t: "--node-taint=${t}") o.k3sNodeTaints
    ++ fromExtra.out;
in
rec {
  inherit
    defaults
    recursiveUpdate
    unique
    words
    canonicalRun
    ;

  # Block-style YAML for a JSON-like value. Scalars are JSON (see
  # yamlScalar); mapping keys are sorted (Nix attrsets are). The output is
  # what `builtins.toJSON` would give, laid out as YAML — the simplest
  # emitter that is still readable in /etc/nodeprep/config.yaml.
  toYAML = v: concatStringsSep "\n" (yamlLines v) + "\n";

  # Settings keys that typed options own but `settings` also sets (as
  # dotted names). The module turns a non-empty list into an assertion.
  conflicts =
    opts:
    let
      o = normalize opts;
    in
    map (concatStringsSep ".") (filter (p: hasAttrByPath p o.settings) (ownedPaths o));

  # The node-label/node-taint arguments services.k3s gives k3s itself. k3s
  # lets command-line lists *replace* the lists from config.yaml and its
  # drop-ins, so any of these would drop nodeprep's labels or taints;
  # `nodeprep up` refuses (join stage) unless join.allowOverride is set. The
  # module turns a non-empty list into an evaluation-time assertion.
  k3sNodeArgConflicts =
    opts:
    let
      o = normalize opts;
    in
    if attrByPath [ "join" "allowOverride" ] false o.settings then [ ] else k3sNodeArgs o;

  # The config file as an attrset: `settings` with the typed options laid
  # over it. `taints` is the complete taint list (its default holds
  # nvidia.com/gpu=present:NoSchedule), so join.defaultTaint is false: a
  # user who empties `taints` really gets no taint.
  mkConfig =
    opts:
    let
      o = normalize opts;
      typed = {
        join =
          {
            taints = o.taints;
            labels = o.labels;
            defaultTaint = false;
          }
          // (if o.k3sConfigPath != null then { k3sConfig = toString o.k3sConfigPath; } else { });
        up = {
          onSelftestFailure = o.onSelftestFailure;
        };
      };
    in
    recursiveUpdate o.settings typed;

  renderConfig =
    opts:
    "# Written by the NixOS module services.nodeprep; change services.nodeprep.* instead.\n"
    + "# JSON-quoted scalars are plain YAML double-quoted strings.\n"
    + toYAML (mkConfig opts);

  # The arguments of `nodeprep up` (the binary is prepended by the caller).
  # Flags use the --name=value form so a value that starts with "-" (every
  # --k3s-arg) cannot be taken for a flag. --vulkan-loader, --egl-lib and
  # --nvml-lib are left out when `settings` sets them (flags would override
  # the config file).
  execArgs =
    opts:
    let
      o = normalize opts;
      s = o.settings;
      metricsFile = metricsFileOf o;
      opt = cond: list: if cond then list else [ ];
    in
    [
      "up"
      "--config=${o.configFile}"
    ]
    ++ opt (o.vulkanLoader != null && !hasAttrByPath [ "selftest" "vulkanLoader" ] s) [
      "--vulkan-loader=${o.vulkanLoader}"
    ]
    ++ opt (o.eglLib != null && !hasAttrByPath [ "selftest" "eglLib" ] s) [ "--egl-lib=${o.eglLib}" ]
    ++ opt (o.nvmlLib != null && !hasAttrByPath [ "nvml" "library" ] s) [ "--nvml-lib=${o.nvmlLib}" ]
    ++ opt (o.metricsTextfileDir != null) [ "--metrics-file=${metricsFile}" ]
    ++ map (a: "--k3s-arg=${a}") (k3sNodeArgs o)
    ++ o.extraArgs;

  # The directories `nodeprep up` writes, for ReadWritePaths= under
  # ProtectSystem=strict: the CDI spec's directory (/run/cdi, owned by
  # nvidia-container-toolkit-cdi-generator.service), the k3s drop-in
  # directory (<k3s config>.d), /run/nodeprep (status file and lock) and the
  # metrics textfile directory when set. Nothing else.
  readWritePaths =
    opts:
    let
      o = normalize opts;
      s = o.settings;
      cfg = mkConfig o;
      spec = attrByPath [ "cdi" "spec" ] defaults.cdiSpec s;
      k3sConfig = attrByPath [ "join" "k3sConfig" ] defaults.k3sConfig cfg;
      statusFile = attrByPath [ "up" "statusFile" ] defaults.statusFile s;
      metricsFile = metricsFileOf o;
    in
    unique (
      [
        (canonicalRun (parentDir spec))
        "${toString k3sConfig}.d"
        defaults.lockDir
        (canonicalRun (parentDir statusFile))
      ]
      ++ (if metricsFile != null then [ (canonicalRun (parentDir metricsFile)) ] else [ ])
    );

  # systemd-tmpfiles rules creating every writable directory except the CDI
  # one (the generator's RuntimeDirectory=cdi makes that, and removes it
  # when it stops). ReadWritePaths= fails the unit when a path is missing,
  # so they must exist before nodeprep.service starts; on NixOS
  # /etc/rancher/k3s/config.yaml.d is an ordinary directory (environment.etc
  # only links individual files), which is why a tmpfiles rule and not
  # ConfigurationDirectory= (that is /etc/<name>) creates it.
  tmpfilesRules =
    opts:
    let
      o = normalize opts;
      cdiDir = canonicalRun (parentDir (attrByPath [ "cdi" "spec" ] defaults.cdiSpec o.settings));
    in
    map (d: "d ${d} 0755 root root -") (filter (d: d != cdiDir) (readWritePaths o));

  # One argument for ExecStart=, as nixpkgs' utils.escapeSystemdExecArg
  # does: JSON-quoted (systemd understands C-style double quotes) with "%"
  # and "$" doubled so systemd expands neither specifiers nor variables.
  escapeSystemdExecArg = arg: replaceStrings [ "%" "$" ] [ "%%" "$$" ] (toJSON (toString arg));

  escapeSystemdExecArgs = args: concatStringsSep " " (map escapeSystemdExecArg args);

  # --- nodeprep health: the periodic re-check (services.nodeprep.health) ---
  # The arguments of `nodeprep health`: the same config file and libraries
  # as `up`, and the metrics file, but no k3s arguments and no extraArgs
  # (those are `up`'s flags).
  healthExecArgs =
    opts:
    let
      o = normalize opts;
      s = o.settings;
      metricsFile = metricsFileOf o;
      opt = cond: list: if cond then list else [ ];
    in
    [
      "health"
      "--config=${o.configFile}"
    ]
    ++ opt (o.vulkanLoader != null && !hasAttrByPath [ "selftest" "vulkanLoader" ] s) [
      "--vulkan-loader=${o.vulkanLoader}"
    ]
    ++ opt (o.eglLib != null && !hasAttrByPath [ "selftest" "eglLib" ] s) [ "--egl-lib=${o.eglLib}" ]
    ++ opt (o.nvmlLib != null && !hasAttrByPath [ "nvml" "library" ] s) [ "--nvml-lib=${o.nvmlLib}" ]
    ++ opt (o.metricsTextfileDir != null) [ "--metrics-file=${metricsFile}" ];

  # What `nodeprep health` writes: /run/nodeprep (lock), the status file's
  # directory and the metrics directory; never the CDI spec or the drop-in.
  healthReadWritePaths =
    opts:
    let
      o = normalize opts;
      statusFile = attrByPath [ "up" "statusFile" ] defaults.statusFile o.settings;
      metricsFile = metricsFileOf o;
    in
    unique (
      [
        defaults.lockDir
        (canonicalRun (parentDir statusFile))
      ]
      ++ (if metricsFile != null then [ (canonicalRun (parentDir metricsFile)) ] else [ ])
    );
  # --- end nodeprep health ---
}
