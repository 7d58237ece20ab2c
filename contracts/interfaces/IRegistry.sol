// SPDX-License-Identifier: MIT
pragma solidity 0.8.28;

/// @title Model and dataset registry
/// @notice Names of the form `org/name` mapped to append-only, numbered versions of content on
/// IPFS, each with its license, publisher and lineage. Models and datasets are two namespaces:
/// `acme/base` may name a model and, apart, a dataset. The first publisher of a name owns it; only
/// its owner publishes new versions or hands the name on; anyone reads. Nobody else, no
/// administrator included, can change a name or a version.
interface IRegistry {
    /// @notice What a name holds.
    enum Kind {
        Model,
        Dataset
    }

    /// @notice What a publisher sends for a new version.
    struct Publication {
        /// @dev The content's CID (for a model, the CID of its folder's file list).
        string cid;
        /// @dev The content's SPDX license identifier, e.g. `Apache-2.0`.
        string license;
        /// @dev A CID of free-form metadata (a model card, data statistics); empty when none.
        string metadataCid;
        /// @dev The name of the version this one derives from (same kind); empty when none.
        string parentName;
        /// @dev That version's number; 0 when there is no parent.
        uint32 parentVersion;
        /// @dev The job of the market that produced the content, which the publisher paid for; 0
        /// when none did.
        uint256 jobId;
    }

    /// @notice One published version, as stored.
    struct Version {
        string cid;
        string license;
        string metadataCid;
        string parentName;
        uint32 parentVersion;
        uint256 jobId;
        /// @dev Who published it: the name's owner at that moment.
        address publisher;
        uint64 publishedAt;
    }

    /// @notice Thrown when a name is not `org/name`: lowercase a-z, 0-9, `-`, `_` and `.`, exactly
    /// one `/` with text on both sides, at most MAX_NAME_LENGTH bytes.
    error InvalidName(string name);
    /// @notice Thrown when a CID is empty, longer than MAX_CID_LENGTH or not alphanumeric (a
    /// metadata CID may be empty).
    error InvalidCid(string cid);
    /// @notice Thrown when a license id is empty, longer than MAX_LICENSE_LENGTH or has characters
    /// an SPDX id never has (letters, digits, `.`, `-` and `+` only).
    error InvalidLicense(string license);
    /// @notice Thrown when someone other than a name's owner publishes under it or transfers it.
    error NotNameOwner(string name, address caller, address owner);
    /// @notice Thrown when a name has no version yet.
    error UnknownName(string name);
    /// @notice Thrown when a name has no version of that number (versions start at 1).
    error UnknownVersion(string name, uint256 version);
    /// @notice Thrown when a parent name is given with version 0.
    error InvalidParent(string parentName, uint256 parentVersion);
    /// @notice Thrown when a name is asked for by an index past the last one.
    error NameIndexOutOfRange(uint256 index, uint256 count);
    /// @notice Thrown when a version names a job the market does not have.
    error UnknownJob(uint256 jobId);
    /// @notice Thrown when a version names a job someone other than its publisher paid for.
    error JobPaidByAnother(uint256 jobId, address caller, address user);
    /// @notice Thrown when a name is handed to the zero address.
    error ZeroAddress();

    /// @notice Emitted when a name gets its first version and so its owner.
    /// @param kind Model or dataset.
    /// @param nameHash keccak256 of the name, for filtering.
    /// @param name The name.
    /// @param owner Its first publisher.
    event NameRegistered(Kind indexed kind, bytes32 indexed nameHash, string name, address indexed owner);
    /// @notice Emitted for every version published.
    /// @param kind Model or dataset.
    /// @param nameHash keccak256 of the name, for filtering.
    /// @param version The new version's number.
    /// @param name The name.
    /// @param publisher Who published it.
    /// @param publication Its content, license, metadata, parent and job.
    event VersionPublished(
        Kind indexed kind,
        bytes32 indexed nameHash,
        uint32 indexed version,
        string name,
        address publisher,
        Publication publication
    );
    /// @notice Emitted when an owner hands a name on.
    /// @param kind Model or dataset.
    /// @param name The name.
    /// @param from The owner until now.
    /// @param to The new owner.
    event NameTransferred(Kind kind, string name, address indexed from, address indexed to);

    /// @notice Publishes the next version of `name`, claiming the name if it has none yet.
    /// @dev Only the name's owner once it has one. A parent, if named, must already exist.
    /// @return version The new version's number (1 for a new name).
    function publish(Kind kind, string calldata name, Publication calldata publication)
        external
        returns (uint32 version);

    /// @notice Hands `name` to `to`; later versions are theirs to publish. Owner only.
    function transferName(Kind kind, string calldata name, address to) external;

    /// @notice The owner of `name`; the zero address if it has no version.
    function ownerOf(Kind kind, string calldata name) external view returns (address);

    /// @notice How many versions `name` has (0 if none): they are numbered 1 to this.
    function versionCount(Kind kind, string calldata name) external view returns (uint32);

    /// @notice Version `number` of `name`; reverts with UnknownVersion if there is none.
    function version(Kind kind, string calldata name, uint32 number) external view returns (Version memory);

    /// @notice The newest version of `name` and its number; reverts with UnknownName if none.
    function latest(Kind kind, string calldata name) external view returns (uint32 number, Version memory);

    /// @notice How many names of `kind` have been registered.
    function nameCount(Kind kind) external view returns (uint256);

    /// @notice The `index`-th name of `kind` registered (from 0), in order of registration.
    function nameAt(Kind kind, uint256 index) external view returns (string memory);

    /// @notice Whether `name` is a well-formed `org/name` (the rule publish applies).
    function isValidName(string calldata name) external pure returns (bool);
}
