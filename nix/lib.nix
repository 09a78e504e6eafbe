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
#   execWords       an ExecStart= line -> its words, as systemd splits them
#   k3sUnitOf       services.k3s + its unit -> what k3sUnitArgs reads
#   k3sUnitArgs     the k3s unit's arguments after the binary, secrets left out
#   k3sDataDirOf    k3s arguments -> the data-dir they name (or the default)
#   chooseGo        pkgs -> the Go builder for go.mod's Go, or null
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

  # The words of an ExecStart= line as systemd splits them (systemd.service(5),
  # "Command lines"): white space separates words, a backslash at the end of
  # a line continues it, "double" and 'single' quotes group (and are
  # removed), and a backslash escapes the next character. Specifier (%) and
  # variable ($) expansion are left alone: the k3s unit uses neither. The
  # rancher module joins its arguments with " \\\n " and appends
  # services.k3s.extraFlags unquoted, so a flag such as "--cluster-cidr
  # 10.42.0.0/16" in one list entry is two words, as systemd runs it.
  execWords =
    s:
    let
      joined = replaceStrings [ "\\\n" ] [ " " ] s;
      wordRe = "(([^[:space:]\"'\\]|\\\\.|\"([^\"\\]|\\\\.)*\"|'[^']*')+)";
      found = map head (filter isList (split wordRe joined));
      pieceRe = "(\"([^\"\\]|\\\\.)*\"|'[^']*'|\\\\.)";
      unescape = t: builtins.concatStringsSep "" (map (x: if isList x then head x else x) (split "\\\\(.)" t));
      piece =
        x:
        if isString x then
          x
        else
          let
            q = head x;
            inner = substring 1 (stringLength q - 2) q;
          in
          if hasPrefix "\"" q then
            unescape inner
          else if hasPrefix "'" q then
            inner
          else
            substring 1 1 q;
      unquote = w: builtins.concatStringsSep "" (map piece (split pieceRe w));
    in
    map unquote found;

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

  # --- defaults (docs/config.md, nodeprep/config/config.go Default) --------

  defaults = {
    configFile = "/etc/nodeprep/config.yaml";
    cdiSpec = "/var/run/cdi/nvidia-container-toolkit.json";
    k3sConfig = "/etc/rancher/k3s/config.yaml";
    # k3s's --data-dir default for root (k3s pkg/cli/cmds DataDir)
    k3sDataDir = "/var/lib/rancher/k3s";
    statusFile = "/run/nodeprep/status.json";
    # hostfs.LockPath is /run/nodeprep/lock: always writable.
    lockDir = "/run/nodeprep";
    # pkgs.addDriverRunpath.driverLink + /lib
    nvmlLib = "/run/opengl-driver/lib/libnvidia-ml.so.1";
    # The CUDA probe's driver library, beside NVML's.
    cudaLib = "/run/opengl-driver/lib/libcuda.so.1";
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
      # The rest of services.k3s and its unit, as k3sUnitOf returns it
      # (serverAddr, disable, nodeName, nodeIP, ..., kubeletConfigFile).
      k3sUnit = { };
      # The k3s unit's PATH directories, in order (k3sUnitPath); null: unknown.
      k3sUnitPath = null;
      # services.k3s.role: "server" makes nodeprep replay `k3s server`,
      # which skips config keys it does not define; an agent stops on them
      k3sRole = "agent";
      # services.k3s.environmentFile (null: none); read by nodeprep at boot
      k3sEnvironmentFile = null;
      # "<libglvnd>/lib" when the driver root lacks the glvnd dispatch set
      glvndDir = null;
      vulkanLoader = null; # "<vulkan-loader>/lib/libvulkan.so.1"
      eglLib = null; # "<libglvnd>/lib/libEGL.so.1"
      nvmlLib = defaults.nvmlLib;
      cudaLib = defaults.cudaLib;
      configFile = defaults.configFile;
      extraArgs = [ ];
      # services.nodeprep.health.kubeconfig: the kubelet's kubeconfig that
      # `nodeprep health` reports to the Node with (null: no report).
      nodeKubeconfig = null;
      nodeReport = true;
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
    ++ (if o.k3sConfigPath != null then [ [ "join" "k3sConfig" ] ] else [ ])
    ++ (if o.k3sEnvironmentFile != null then [ [ "join" "k3sEnvironmentFile" ] ] else [ ]);

  metricsFileOf =
    o:
    if o.metricsTextfileDir != null then
      "${toString o.metricsTextfileDir}/${defaults.metricsFileName}"
    else
      attrByPath [ "up" "metricsFile" ] null o.settings;

  # Flags whose value is a secret (k3s pkg/cli/cmds: token, t, token-file,
  # agent-token, agent-token-file, vpn-auth, vpn-auth-file, the etcd S3
  # keys, datastore-endpoint, which may carry a password, cluster-secret).
  # They are left out of everything nodeprep is given, value and all: what
  # nodeprep replays is their absence, which changes nothing it judges.
  secretFlagRe = "--?(token|t|token-file|agent-token|agent-token-file|vpn-auth|vpn-auth-file|cluster-secret|etcd-s3-access-key|etcd-s3-secret-key|datastore-endpoint)(=.*)?";

  # ws without secret flags: "--token=x" is one word, "--token x" two.
  dropSecrets =
    ws:
    (foldl' (
      st: w:
      if st.skip then
        st // { skip = false; }
      else
        let
          m = match secretFlagRe w;
        in
        if m == null then
          st // { out = st.out ++ [ w ]; }
        else
          st // { skip = builtins.elemAt m 1 == null; }
    ) {
      skip = false;
      out = [ ];
    } ws).out;

  # The k3s unit as k3sUnitArgs reads it, with the defaults of the options
  # a nixpkgs may not have (see k3sUnitOf).
  unitOf =
    o:
    {
      serverAddr = "";
      disable = [ ];
      nodeName = null;
      nodeIP = null;
      nodeExternalIP = null;
      selinux = false;
      clusterInit = false;
      disableAgent = false;
      kubeletConfigFile = null;
      kubeProxyConfigFile = null;
    }
    // o.k3sUnit
    // {
      role = o.k3sRole;
      configPath = o.k3sConfigPath;
      nodeLabel = o.k3sNodeLabels;
      nodeTaint = o.k3sNodeTaints;
      extraFlags = o.k3sExtraFlags;
    };

  # The k3s unit's arguments after the binary, as nixpkgs' k3s unit passes
  # them (nixos/modules/services/cluster/rancher/default.nix, mkRancherModule's
  # ExecStart, since the k3s/rke2 merge of nixpkgs PR 447847; the k3s module
  # before it, nixos/modules/services/cluster/k3s/default.nix, passes the
  # same flags for the options it has, which k3sUnitOf reads as absent), in
  # the same order: the role, --server, --config, --disable, --node-name,
  # --node-label, --node-taint, --node-ip, --node-external-ip, --selinux,
  # --kubelet-arg=config=<file>, --kube-proxy-arg=config=<file>,
  # --cluster-init, --disable-agent, then services.k3s.extraFlags split as
  # systemd splits the line (execWords). The secret flags (--token,
  # --token-file, --agent-token, --agent-token-file, and those of
  # secretFlagRe in extraFlags) are left out, value and all.
  k3sArgsOfUnit =
    u:
    let
      opt = c: l: if c then l else [ ];
      extra = if isList u.extraFlags then flatten u.extraFlags else [ u.extraFlags ];
      flatten = l: concatMap (x: if isList x then flatten x else [ x ]) l;
    in
    [ u.role ]
    ++ opt (u.serverAddr != "") [
      "--server"
      u.serverAddr
    ]
    ++ opt (u.configPath != null) [
      "--config"
      (toString u.configPath)
    ]
    ++ map (d: "--disable=${d}") u.disable
    ++ opt (u.nodeName != null) [ "--node-name=${u.nodeName}" ]
    ++ map (l: "--node-label=${l}") u.nodeLabel
    ++ map (t: "--node-taint=${t}") u.nodeTaint
    ++ opt (u.nodeIP != null) [ "--node-ip=${u.nodeIP}" ]
    ++ opt (u.nodeExternalIP != null) [ "--node-external-ip=${u.nodeExternalIP}" ]
    ++ opt u.selinux [ "--selinux" ]
    ++ opt (u.kubeletConfigFile != null) [ "--kubelet-arg=config=${u.kubeletConfigFile}" ]
    ++ opt (u.kubeProxyConfigFile != null) [ "--kube-proxy-arg=config=${u.kubeProxyConfigFile}" ]
    ++ opt u.clusterInit [ "--cluster-init" ]
    ++ opt u.disableAgent [ "--disable-agent" ]
    ++ dropSecrets (concatMap execWords extra);

  # The k3s flags of k3sArgsOfUnit that nodeprep's build-time checks read:
  # node-label, node-taint, config (-c), data-dir (-d), kubelet-arg and
  # container-runtime-endpoint, each as { name; value; } with the long name,
  # in order. "--flag x" pairs become one entry.
  k3sFlags = o: flagsOfWords (tail (k3sArgsOfUnit (unitOf o)));

  flagsOfWords =
    ws:
    let
      long = n: if n == "c" then "config" else if n == "d" then "data-dir" else n;
      names = "node-label|node-taint|config|data-dir|kubelet-arg|container-runtime-endpoint";
      step =
        st: w:
        if st.pending != null then
          {
            pending = null;
            out = st.out ++ [ { name = st.pending; value = w; } ];
          }
        else
          let
            withValue = match "(--?(${names})|-(c|d))=(.*)" w;
            bare = match "--?(${names})|-(c|d)" w;
            nameOf = m: i: long (if builtins.elemAt m i != null then builtins.elemAt m i else builtins.elemAt m (i + 1));
          in
          if withValue != null then
            {
              pending = null;
              out = st.out ++ [ { name = nameOf withValue 1; value = builtins.elemAt withValue 3; } ];
            }
          else if bare != null then
            {
              pending = nameOf bare 0;
              out = st.out;
            }
          else
            st;
    in
    (foldl' step {
      pending = null;
      out = [ ];
    } ws).out;

  # Every --k3s-arg nodeprep gets: the k3s unit's own arguments
  # (k3sArgsOfUnit), so nodeprep merges its drop-in with exactly what k3s
  # starts with.
  k3sArgs = o: k3sArgsOfUnit (unitOf o);

  # The node-label/node-taint arguments among them (k3sNodeArgConflicts).
  k3sNodeArgs =
    o:
    map (f: "--${f.name}=${f.value}") (filter (f: elem f.name [ "node-label" "node-taint" ]) (k3sFlags o));

  # k3s's data-dir as the arguments name it (the last --data-dir/-d: a
  # string flag keeps its last value), else k3s's default. A data-dir set in
  # a k3s config file or K3S_DATA_DIR is read by nodeprep at boot.
  dataDirOfArgs =
    args:
    let
      fs = filter (f: f.name == "data-dir") (flagsOfWords args);
    in
    if fs == [ ] then defaults.k3sDataDir else (builtins.elemAt fs (builtins.length fs - 1)).value;

  # k3s's data-dir as the k3s unit's arguments name it (dataDirOfArgs).
  k3sDataDirOf = opts: dataDirOfArgs (tail (k3sArgs (normalize opts)));

  # The config file k3s reads, as far as the build can know (k3s
  # pkg/configfilearg: K3S_CONFIG_FILE, then --config, then the default):
  # the first --config/-c of extraFlags, else services.k3s.configPath (which
  # the k3s module passes as --config), else settings.join.k3sConfig, else
  # the default. K3S_CONFIG_FILE in an environmentFile is unknowable here.
  k3sConfigOf =
    opts:
    let
      o = normalize opts;
      fromFlags = filter (f: f.name == "config") (k3sFlags o);
    in
    if fromFlags != [ ] then
      (head fromFlags).value
    else if o.k3sConfigPath != null then
      toString o.k3sConfigPath
    else
      attrByPath [ "join" "k3sConfig" ] defaults.k3sConfig o.settings;

  # --- taints and labels (the rules of nodeprep/k3s/label.go) -------------
  # Checked at evaluation so `nixos-rebuild` refuses what the kubelet would
  # refuse at the next boot (k3s would then not start).

  hasSuffix = suffix: s: let n = stringLength s; m = stringLength suffix; in m <= n && substring (n - m) m s == suffix;

  # apimachinery validation.IsQualifiedName: [prefix/]name, the prefix a
  # DNS-1123 subdomain (<= 253), the name <= 63 alphanumerics with -_. inside.
  dns1123Subdomain = "[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*";
  qualifiedNamePart = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
  keyProblems =
    what: key:
    let
      parts = match "(([^/]*)/)?([^/]*)" key;
      prefix = if parts == null then null else builtins.elemAt parts 1;
      name = if parts == null then null else builtins.elemAt parts 2;
    in
    if parts == null then
      [ "${what}: key \"${key}\" has more than one '/'" ]
    else
      (
        if prefix != null && (stringLength prefix > 253 || match dns1123Subdomain prefix == null) then
          [ "${what}: key prefix \"${prefix}\" is not a DNS subdomain (lower-case alphanumerics, '-', '.', at most 253)" ]
        else
          [ ]
      )
      ++ (
        if stringLength name > 63 || match qualifiedNamePart name == null then
          [ "${what}: key name \"${name}\" must be 1-63 alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric" ]
        else
          [ ]
      );

  # validation.IsValidLabelValue: empty, or <= 63 like a key's name.
  valueProblems =
    what: v:
    if v == "" || (stringLength v <= 63 && match qualifiedNamePart v != null) then
      [ ]
    else
      [ "${what}: value \"${v}\" must be empty or 1-63 alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric" ];

  # k8s.io/kubelet/pkg/apis/well_known_labels.go IsKubeletLabel: in the
  # kubernetes.io and k8s.io namespaces the kubelet may set only these
  # labels and any under kubelet.kubernetes.io/ or node.kubernetes.io/.
  kubeletLabels = [
    "kubernetes.io/hostname"
    "kubernetes.io/arch"
    "kubernetes.io/os"
    "beta.kubernetes.io/arch"
    "beta.kubernetes.io/os"
    "beta.kubernetes.io/instance-type"
    "node.kubernetes.io/instance-type"
    "topology.kubernetes.io/region"
    "topology.kubernetes.io/zone"
    "failure-domain.beta.kubernetes.io/region"
    "failure-domain.beta.kubernetes.io/zone"
  ];
  inDomain = ns: d: ns == d || hasSuffix ".${d}" ns;
  kubeletMaySet =
    key:
    let
      parts = match "([^/]*)/.*" key;
      ns = if parts == null then "" else head parts;
    in
    !(inDomain ns "kubernetes.io" || inDomain ns "k8s.io")
    || elem key kubeletLabels
    || inDomain ns "kubelet.kubernetes.io"
    || inDomain ns "node.kubernetes.io";

  labelProblems =
    l:
    let
      kv = match "([^=]*)=(.*)" l;
      what = "label \"${l}\"";
    in
    if !(isString l) then
      [ "label ${toJSON l}: want a string key=value" ]
    else if kv == null then
      [ "${what}: want key=value" ]
    else
      let
        key = head kv;
        value = builtins.elemAt kv 1;
        kp = keyProblems what key;
      in
      kp
      ++ valueProblems what value
      ++ (
        if kp == [ ] && !(kubeletMaySet key) then
          [ "${what}: the kubelet may not set labels in the kubernetes.io or k8s.io namespaces except under kubelet.kubernetes.io/, node.kubernetes.io/ or ${concatStringsSep ", " kubeletLabels} (k3s would not start)" ]
        else
          [ ]
      );

  taintProblems =
    t:
    let
      parts = match "([^:=]*)(=([^:]*))?:(.*)" t;
      what = "taint \"${t}\"";
    in
    if !(isString t) then
      [ "taint ${toJSON t}: want a string key[=value]:Effect" ]
    else if parts == null then
      [ "${what}: want key[=value]:Effect" ]
    else
      let
        key = head parts;
        value = let v = builtins.elemAt parts 2; in if v == null then "" else v;
        effect = builtins.elemAt parts 3;
      in
      keyProblems what key
      ++ valueProblems what value
      ++ (
        if elem effect [ "NoSchedule" "PreferNoSchedule" "NoExecute" ] then
          [ ]
        else
          [ "${what}: effect \"${effect}\" is not one of NoSchedule, PreferNoSchedule, NoExecute" ]
      );

  # go.mod's go directive ("1.26"): the oldest Go that builds nodeprep.
  goMinimum = head (match ".*\ngo ([0-9]+[.][0-9]+).*" ("\n" + builtins.readFile ../go.mod));

in
rec {
  inherit
    labelProblems
    taintProblems
    k3sConfigOf
    k3sDataDirOf
    defaults
    recursiveUpdate
    unique
    words
    execWords
    canonicalRun
    k3sArgsOfUnit
    dataDirOfArgs
    goMinimum
    ;

  # What k3sArgsOfUnit reads of services.k3s beyond role, configPath,
  # nodeLabel, nodeTaint and extraFlags (which the module passes as options
  # of their own), from the option values `k3s` (config.services.k3s) and
  # the unit's ExecStart. An option this nixpkgs' k3s module lacks (the k3s
  # module before PR 447847 has no nodeName, nodeIP, disable, selinux) is
  # read as its default, which is what the unit then passes. The two config
  # files the unit names are store files made by the k3s module itself
  # (pkgs.formats...generate, a format that differs between releases), so
  # their paths are taken from the ExecStart words rather than re-made;
  # kubeletConfig is the KubeletConfiguration the file holds (apiVersion,
  # kind, gracefulNodeShutdown's two periods when enabled,
  # extraKubeletConfig), or null when the unit passes none.
  k3sUnitOf =
    k3s: execStart:
    let
      graceful = k3s.gracefulNodeShutdown or { };
      kubeletParams =
        (
          if graceful.enable or false then
            {
              inherit (graceful) shutdownGracePeriod shutdownGracePeriodCriticalPods;
            }
          else
            { }
        )
        // (k3s.extraKubeletConfig or { });
      line = if isList execStart then builtins.elemAt execStart (builtins.length execStart - 1) else execStart;
      unitWords = if line == null then [ ] else execWords line;
      fileArg =
        prefix:
        let
          ws = filter (hasPrefix prefix) unitWords;
        in
        if ws == [ ] then null else substring (stringLength prefix) (-1) (head ws);
    in
    {
      serverAddr = k3s.serverAddr or "";
      disable = k3s.disable or [ ];
      nodeName = k3s.nodeName or null;
      nodeIP = k3s.nodeIP or null;
      nodeExternalIP = k3s.nodeExternalIP or null;
      selinux = k3s.selinux or false;
      clusterInit = k3s.clusterInit or false;
      disableAgent = k3s.disableAgent or false;
      kubeletConfigFile = if kubeletParams == { } then null else fileArg "--kubelet-arg=config=";
      kubeProxyConfigFile = if (k3s.extraKubeProxyConfig or { }) == { } then null else fileArg "--kube-proxy-arg=config=";
      kubeletConfig =
        if kubeletParams == { } then
          null
        else
          {
            apiVersion = "kubelet.config.k8s.io/v1beta1";
            kind = "KubeletConfiguration";
          }
          // kubeletParams;
    };

  # The directories of a systemd unit's PATH, in order, from the unit's
  # `path` packages (`binOf` is lib.getBin): each package's bin, then each
  # one's sbin, as nixos/lib/systemd-lib.nix serviceConfig builds
  # Environment=PATH (makeBinPath, then makeSearchPathOutput "bin" "sbin").
  unitPathOf = binOf: pkgs: map (p: "${binOf p}/bin") pkgs ++ map (p: "${binOf p}/sbin") pkgs;

  # The Go builder for nodeprep: { builder; go; name; }, or null when this
  # nixpkgs has none for Go >= goMinimum. nixpkgs' default (buildGoModule
  # with pkgs.go) when its Go is new enough, else the newest versioned
  # buildGo1NNModule whose go_1_NN is. Each attribute is tried with
  # builtins.tryEval: when nixpkgs drops a Go it leaves a throw in its place
  # (pkgs/top-level/aliases.nix: buildGo122Module = throw ...), which `or`
  # does not catch, so `pkgs.buildGo126Module or pkgs.buildGoModule` fails
  # the day Go 1.26 goes.
  chooseGo =
    pkgs:
    let
      versionOf =
        attr:
        let
          r = builtins.tryEval (pkgs.${attr}.version);
        in
        if pkgs ? ${attr} && r.success && isString r.value then r.value else null;
      present =
        attr:
        pkgs ? ${attr} && (builtins.tryEval (builtins.seq pkgs.${attr} true)).success;
      newEnough = v: v != null && builtins.compareVersions v goMinimum >= 0;
      usable = c: present c.name && newEnough (versionOf c.go);
      minor = builtins.fromJSON (builtins.elemAt (builtins.splitVersion goMinimum) 1);
      versioned = builtins.genList (
        i:
        let
          m = toString (minor + 39 - i);
        in
        {
          name = "buildGo1${m}Module";
          go = "go_1_${m}";
        }
      ) 40;
      candidates = filter usable ([
        {
          name = "buildGoModule";
          go = "go";
        }
      ] ++ versioned);
    in
    if candidates == [ ] then
      null
    else
      let
        c = head candidates;
      in
      {
        inherit (c) name;
        builder = pkgs.${c.name};
        go = pkgs.${c.go};
      };

  # The k3s arguments nodeprep replays (--k3s-arg, join.k3sArgs): the k3s
  # unit's own (k3sArgsOfUnit) for the module's options.
  k3sReplayArgs = opts: k3sArgs (normalize opts);

  # The message for a nixpkgs without a Go builder chooseGo accepts.
  noGoMessage =
    pkgs:
    let
      r = builtins.tryEval (pkgs.go.version);
    in
    "nodeprep needs Go >= ${goMinimum} (go.mod), but this nixpkgs' default Go is ${
      if r.success then r.value else "missing"
    } and it has no buildGo1NNModule for Go >= ${goMinimum} (a removed one is a throw in pkgs/top-level/aliases.nix). Use a nixpkgs with Go ${goMinimum} (nixos-unstable, or release-25.11 since nixpkgs PR 490463), or set services.nodeprep.package.";

  # chooseGo's builder, or a throw with noGoMessage.
  goBuilderOf =
    pkgs:
    let
      c = chooseGo pkgs;
    in
    if c == null then throw (noGoMessage pkgs) else c;


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
      allow = attrByPath [ "join" "allowOverride" ] false o.settings;
      after = prefix: a: if substring 0 (stringLength prefix) a == prefix then substring (stringLength prefix) (-1) a else null;
      labelKey = l: head (match "([^=]*).*" l);
      taintKeyEffect =
        t:
        let
          m = match "([^=:]*)(=[^:]*)?:(.*)" t;
        in
        if m == null then null else "${builtins.elemAt m 0}:${builtins.elemAt m 2}";
      ourLabelKeys = map labelKey o.labels;
      ourTaints = filter (x: x != null) (map taintKeyEffect o.taints);
      conflicting =
        a:
        let
          l = after "--node-label=" a;
          t = after "--node-taint=" a;
        in
        (l != null && !allow && elem (labelKey l) ourLabelKeys && !(elem l o.labels))
        || (t != null && taintKeyEffect t != null && elem (taintKeyEffect t) ourTaints);
    in
    filter conflicting (k3sNodeArgs o);

  # Every problem with the node's labels and taints (services.nodeprep's
  # and services.k3s's nodeLabel/nodeTaint), one message each, checked with
  # the rules of nodeprep/k3s/label.go (Kubernetes qualified names and
  # label values, the three taint effects, the kubelet's self-label rule).
  # The module turns a non-empty list into an assertion, so nixos-rebuild
  # refuses what would keep k3s from starting at the next boot.
  entryProblems =
    opts:
    let
      o = normalize opts;
    in
    concatMap labelProblems (o.labels ++ o.k3sNodeLabels) ++ concatMap taintProblems (o.taints ++ o.k3sNodeTaints);

  # The --kubelet-arg values of services.k3s.extraFlags that take the
  # node's taints or labels away from node-taint/node-label (see
  # nodeprep/k3s kubeletArgConflicts: k3s drops its own
  # --register-with-taints for a plain kubelet-arg, and the kubelet keeps
  # only the last one, so "+=" loses it too; a plain node-labels replaces
  # k3s's --node-labels, "node-labels+=" merges). Empty with
  # join.allowOverride.
  kubeletArgConflicts =
    opts:
    let
      o = normalize opts;
      bad =
        f:
        let
          m = match "-*(register-with-taints|node-labels)([+-]?)=.*" f.value;
        in
        f.name == "kubelet-arg"
        && m != null
        && (
          (head m == "register-with-taints" && builtins.elemAt m 1 != "-" && o.taints != [ ])
          || (head m == "node-labels" && builtins.elemAt m 1 == "")
        );
    in
    if attrByPath [ "join" "allowOverride" ] false o.settings then
      [ ]
    else
      map (f: "--kubelet-arg=${f.value}") (filter bad (k3sFlags o));

  # The config file as an attrset: `settings` with the typed options laid
  # over it. `taints` is the complete taint list (its default holds
  # nvidia.com/gpu=present:NoSchedule), so join.defaultTaint is false: a
  # user who empties `taints` really gets no taint.
  mkConfig =
    opts:
    let
      o = normalize opts;
      s = o.settings;
      # Library paths so that `nodeprep inspect`, `cdi check` and `selftest`
      # run by hand need no flags; settings that name them win.
      unlessSet = path: v: if v == null || hasAttrByPath path s then { } else setAt path v;
      setAt = path: v: if path == [ ] then v else { ${head path} = setAt (tail path) v; };
      paths = foldl' recursiveUpdate { } [
        (unlessSet [ "nvml" "library" ] o.nvmlLib)
        (unlessSet [ "selftest" "vulkanLoader" ] o.vulkanLoader)
        (unlessSet [ "selftest" "eglLib" ] o.eglLib)
        (unlessSet [ "selftest" "cudaLib" ] o.cudaLib)
        (unlessSet [ "cdi" "glvndDirs" ] (if o.glvndDir == null then null else [ (toString o.glvndDir) ]))
      ];
      typed = {
        join =
          {
            taints = o.taints;
            labels = o.labels;
            defaultTaint = false;
          }
          // (if o.k3sConfigPath != null then { k3sConfig = toString o.k3sConfigPath; } else { })
          // (if o.k3sEnvironmentFile != null then { k3sEnvironmentFile = toString o.k3sEnvironmentFile; } else { })
          # The k3s arguments the module knows (role, data-dir, config,
          # endpoint, node labels and taints; secrets dropped), also for
          # health, cdi check and cdi patch, which get no --k3s-arg: every
          # command judges the k3s that runs (`up` gets them as flags too).
          // (if k3sArgs o != [ ] then { k3sArgs = k3sArgs o; } else { })
          # Where k3s looks for the NVIDIA runtimes (exec.LookPath on its own
          # PATH): nodeprep predicts k3s's runtime handlers from it before k3s
          # has rendered its containerd config.
          // (if o.k3sUnitPath != null then { k3sUnitPath = o.k3sUnitPath; } else { });
        up = {
          onSelftestFailure = o.onSelftestFailure;
        };
      };
    in
    recursiveUpdate (recursiveUpdate paths o.settings) typed;

  renderConfig =
    opts:
    "# Written by the NixOS module services.nodeprep; change services.nodeprep.* instead.\n"
    + "# JSON-quoted scalars are plain YAML double-quoted strings.\n"
    + toYAML (mkConfig opts);

  # The arguments of `nodeprep up` (the binary is prepended by the caller).
  # Flags use the --name=value form so a value that starts with "-" (every
  # --k3s-arg) cannot be taken for a flag. --vulkan-loader, --egl-lib and
  # --nvml-lib and --cuda-lib are left out when `settings` sets them (flags would override
  # the config file).
  execArgs =
    opts:
    let
      o = normalize opts;
    in
    commonArgs "up" opts ++ map (a: "--k3s-arg=${a}") (k3sArgs o) ++ o.extraArgs;

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
      k3sConfig = k3sConfigOf o;
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

  # systemd-tmpfiles rules creating every writable directory: ReadWritePaths=
  # fails the unit (226/NAMESPACE) when a path is missing, so each must
  # exist before nodeprep.service starts. That includes the CDI spec's
  # directory: /run/cdi is also the generator's RuntimeDirectory= (which
  # adopts an existing directory and removes it when the generator stops;
  # nodeprep, PartOf the generator, stops with it), and a spec under /etc/cdi
  # has nobody else to make its directory. On NixOS
  # /etc/rancher/k3s/config.yaml.d is an ordinary directory (environment.etc
  # only links individual files), which is why a tmpfiles rule and not
  # ConfigurationDirectory= (that is /etc/<name>) creates it.
  tmpfilesRules = opts: map (d: "d ${d} 0755 root root -") (readWritePaths opts);

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
    in
    commonArgs "health" opts
    ++ (
      if !o.nodeReport then
        [ "--no-node-report" ]
      else if o.nodeKubeconfig != null then
        [ "--kubeconfig=${o.nodeKubeconfig}" ]
      else
        [ ]
    );

  # The arguments `up` and `health` share: the command, the config file,
  # the libraries `settings` does not set, the metrics file.
  commonArgs =
    command: opts:
    let
      o = normalize opts;
      s = o.settings;
      opt = cond: list: if cond then list else [ ];
    in
    [
      command
      "--config=${o.configFile}"
    ]
    ++ opt (o.vulkanLoader != null && !hasAttrByPath [ "selftest" "vulkanLoader" ] s) [
      "--vulkan-loader=${o.vulkanLoader}"
    ]
    ++ opt (o.eglLib != null && !hasAttrByPath [ "selftest" "eglLib" ] s) [ "--egl-lib=${o.eglLib}" ]
    ++ opt (o.nvmlLib != null && !hasAttrByPath [ "nvml" "library" ] s) [ "--nvml-lib=${o.nvmlLib}" ]
    ++ opt (o.cudaLib != null && !hasAttrByPath [ "selftest" "cudaLib" ] s) [ "--cuda-lib=${o.cudaLib}" ]
    ++ opt (o.metricsTextfileDir != null) [ "--metrics-file=${metricsFileOf o}" ];

  # What `nodeprep health` writes: /run/nodeprep (lock), the status file's
  # directory, the metrics directory, and the CDI spec directories it
  # re-patches (patchReadWritePaths); never the drop-in.
  healthReadWritePaths = patchReadWritePaths;

  # The lock, status and metrics directories.
  statusReadWritePaths =
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

  # --- nodeprep cdi patch on write: the path unit (re-patch after boot) ---
  # The CDI spec directories the path unit watches (PathChanged=): the
  # runtime's (cdi.specDirs, else containerd's default /etc/cdi and
  # /var/run/cdi) and the directory of the spec nodeprep patches, with
  # /var/run spelt /run as systemd resolves it.
  cdiWatchDirs =
    opts:
    let
      o = normalize opts;
      s = o.settings;
      dirs = attrByPath [ "cdi" "specDirs" ] [ "/etc/cdi" "/var/run/cdi" ] s;
      spec = attrByPath [ "cdi" "spec" ] defaults.cdiSpec s;
    in
    unique (map canonicalRun (dirs ++ [ (parentDir spec) ]));

  # The arguments of the re-patch the path unit runs: `cdi patch` with the
  # module's config file (spec, directories, device names, status file),
  # quiet when nothing changed, waiting for an `up` or `health` that holds
  # the lock, and the metrics file `up` writes.
  patchExecArgs =
    opts:
    let
      o = normalize opts;
    in
    [
      "cdi"
      "patch"
      "--config=${o.configFile}"
      "--changes-only"
      "--wait=30s"
    ]
    ++ (if o.metricsTextfileDir != null then [ "--metrics-file=${metricsFileOf o}" ] else [ ]);

  # What the re-patch writes: the lock, the status and metrics directories,
  # and the watched spec directories ("-": a directory that does not exist,
  # such as /etc/cdi on most hosts, is not an error for ReadWritePaths=).
  patchReadWritePaths =
    opts: statusReadWritePaths opts ++ map (d: "-" + d) (cdiWatchDirs opts);
  # --- end nodeprep cdi patch on write ---
}
